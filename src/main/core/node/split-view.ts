import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { splitPartName } from '../gguf/split.js';

/**
 * A split model as llama.cpp loads it, inside a node's cache: a folder `<cache>/split/<id>/` of links named by
 * llama.cpp's rule (model-0000i-of-0000N.gguf) to the parts, which stay in models/ under their sha256s.
 * Symbolic links, or hard links where the system refuses those (Windows without developer mode).
 */

/** Whether `link` is a link to `target`: a symbolic link naming it, or a hard link to the same inode. */
function linksTo(link: string, target: string): boolean {
  try {
    const l = lstatSync(link);
    if (l.isSymbolicLink()) return readlinkSync(link) === target;
    const t = statSync(target);
    return l.ino === t.ino && l.dev === t.dev;
  } catch {
    return false;
  }
}

/**
 * Make (or check) the view `dir` of `targets`, the parts' files in load order. Idempotent (a second replica of
 * the model may be loading from it): only a missing or wrong link is made again. Returns the first part's path,
 * the one llama-server is given.
 */
export function makeSplitView(dir: string, targets: readonly string[]): string {
  mkdirSync(dir, { recursive: true });
  targets.forEach((file, i) => {
    const link = join(dir, splitPartName('model', i + 1, targets.length));
    const target = resolve(file);
    if (linksTo(link, target)) return;
    rmSync(link, { force: true });
    try {
      symlinkSync(target, link);
    } catch (err) {
      if (!['EPERM', 'EACCES', 'ENOTSUP', 'EINVAL'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
      linkSync(target, link);
    }
  });
  return join(dir, splitPartName('model', 1, targets.length));
}

/** Remove the views under `root` that link to `target` (a part being evicted; call before it is removed). */
export function dropSplitViews(root: string, target: string): void {
  if (!existsSync(root)) return;
  for (const id of readdirSync(root)) {
    const dir = join(root, id);
    let uses = false;
    try {
      uses = readdirSync(dir).some((f) => linksTo(join(dir, f), resolve(target)));
    } catch {
      /* not a view: leave it */
    }
    if (uses) rmSync(dir, { recursive: true, force: true });
  }
}
