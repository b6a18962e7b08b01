import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { splitPartName } from '../../gguf/split.js';
import { isBusy } from './windows-files.js';

/**
 * A split model as llama.cpp loads it, inside a node's cache: a folder `<cache>/split/<id>/` of links named by
 * llama.cpp's rule (model-0000i-of-0000N.gguf) to the parts, which stay in models/ under their sha256s.
 * Symbolic links, or hard links where the system refuses those (Windows without developer mode): linkPart.
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
 * Link `link` to the part `target`: a symbolic link, else a hard link (Windows refuses symbolic links without
 * admin rights or developer mode: EPERM). Never a copy: it would double the disk a split model takes, outside
 * the cache's budget; a filesystem with neither (FAT32, exFAT) cannot hold a split model's view, and says so.
 */
export function linkPart(target: string, link: string, ops: { symlink: (t: string, l: string) => void; link: (t: string, l: string) => void } = { symlink: symlinkSync, link: linkSync }): void {
  try {
    ops.symlink(target, link);
    return;
  } catch (err) {
    if (!['EPERM', 'EACCES', 'ENOTSUP', 'EINVAL'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
  }
  try {
    ops.link(target, link);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new RelayError(ErrorCode.IO_ERROR, `cannot link ${link} to ${target} (${code}): the cache's filesystem allows neither symbolic nor hard links (FAT32, exFAT?); put the node's home on NTFS`);
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
    linkPart(target, link);
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
    if (!uses) continue;
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch (err) {
      if (!isBusy(err)) throw err; // Windows: a part open elsewhere; the view goes with the next eviction
    }
  }
}
