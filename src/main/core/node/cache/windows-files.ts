import { renameSync, rmSync } from 'node:fs';
import { posix, win32 } from 'node:path';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * The node cache's file rules that Windows makes necessary, as small functions the cache (cache.ts,
 * split-view.ts) calls on every platform. Windows refuses to delete or rename over a file another process has
 * open (llama-server's mmap, a virus scanner reading a file just written): those calls fail with EPERM, EBUSY
 * or EACCES there, where Linux would succeed.
 */

/** The codes Windows answers with when a file is open elsewhere (libuv maps ERROR_SHARING_VIOLATION to EBUSY, ERROR_ACCESS_DENIED to EPERM). */
const BUSY_CODES = new Set(['EPERM', 'EBUSY', 'EACCES']);

/**
 * Whether `err` is Windows' "that file is open elsewhere". Only on Windows: elsewhere EPERM and EACCES are real
 * permission errors (a cache left root-owned by `sudo relay up`), which must surface, not wait.
 */
export function isBusy(err: unknown, platform: NodeJS.Platform = process.platform): boolean {
  return platform === 'win32' && BUSY_CODES.has((err as NodeJS.ErrnoException | null)?.code ?? '');
}

/**
 * Remove `path` (gone already is fine). Returns false, leaving the file, when the system refuses because it is
 * open elsewhere: the file stays in the cache, listed and counted, and the next eviction tries it again.
 */
export function removeUnlessBusy(path: string, rm: (p: string) => void = (p) => rmSync(p, { force: true }), platform: NodeJS.Platform = process.platform): boolean {
  try {
    rm(path);
    return true;
  } catch (err) {
    if (isBusy(err, platform)) return false;
    throw err;
  }
}

/**
 * Move a verified push into place. When the system refuses (a scanner still reading the new file), the
 * verified partial file is left where it is: the hub's next push resumes at its end, verifies it again and
 * renames it then (PUSH_INCOMPLETE, which the hub retries).
 */
export function renameIntoPlace(from: string, to: string, what: string, rename: (a: string, b: string) => void = renameSync, platform: NodeJS.Platform = process.platform): void {
  try {
    rename(from, to);
  } catch (err) {
    if (!isBusy(err, platform)) throw err;
    const code = (err as NodeJS.ErrnoException).code ?? '';
    throw new RelayError(ErrorCode.PUSH_INCOMPLETE, `${what} is verified but the system refused to move it into place (${code}: open elsewhere); the next push renames it`);
  }
}

/** Windows' MAX_PATH: 259 characters and the terminating NUL, for programs not marked long-path aware (llama-server.exe, ggml-rpc-server.exe). */
export const WINDOWS_MAX_PATH = 260;

const SHA = 'f'.repeat(64);
/**
 * The paths relay creates under a node's home, each at its longest (file names are sha256s, so their length
 * never depends on what the hub sends): the split view is the longest, 103 characters after the home.
 */
export function nodePaths(home: string, platform: NodeJS.Platform): string[] {
  const { join } = platform === 'win32' ? win32 : posix;
  const cache = join(home, 'cache');
  return [
    join(home, 'node.json.bak'),
    join(cache, 'models', `${SHA}.gguf`),
    join(cache, 'partial', `${SHA}.part`),
    join(cache, 'split', SHA, 'model-00001-of-00002.gguf'),
    join(cache, 'llama', 'rpc', `relay-index-${SHA}.json`),
  ];
}

/** The longest path relay creates under `home`. */
export function longestNodePath(home: string, platform: NodeJS.Platform): string {
  return nodePaths(home, platform).reduce((a, b) => (b.length > a.length ? b : a));
}

/** On Windows, why `home` is too deep for llama-server to open its models (null when it is not, or not Windows). */
export function pathLengthProblem(home: string, platform: NodeJS.Platform): string | null {
  if (platform !== 'win32') return null;
  const longest = longestNodePath(home, platform);
  if (longest.length < WINDOWS_MAX_PATH) return null;
  const room = WINDOWS_MAX_PATH - 1 - (longest.length - home.length);
  return `the node's home ${home} is ${home.length} characters long; its cache paths reach ${longest.length}, past Windows' MAX_PATH (${WINDOWS_MAX_PATH}), so llama-server.exe could not open them: use a home of at most ${room} characters (--home)`;
}
