import { existsSync, statSync } from 'node:fs';

/**
 * One download per destination file, whatever pulls want it (two quantizations of a vision repo share its
 * projector): a pull whose file another is writing waits for that one to end — its own abort still stops the
 * wait — then takes the file the other verified, or goes on from what it left on disk. The sha256 of a file this
 * process wrote is remembered with its mtime, so the waiting pull trusts it without reading it again.
 */
export class OneWriterPerFile {
  private readonly writing = new Map<string, Promise<string>>();
  private readonly verified = new Map<string, { sha: string; mtimeMs: number }>();

  /** The sha256 this process verified for `dest`, if the file on disk is still the one it wrote; else null. */
  verifiedSha(dest: string, size: number): string | null {
    const known = this.verified.get(dest);
    return known && existsSync(dest) && statSync(dest).size === size && statSync(dest).mtimeMs === known.mtimeMs ? known.sha : null;
  }

  /** The sha256 of `dest` once it is whole and verified: the one a pull before this one wrote, or `download`'s. */
  async fetch(dest: string, size: number, signal: AbortSignal, download: () => Promise<string>): Promise<string> {
    for (let ahead = this.writing.get(dest); ahead; ahead = this.writing.get(dest)) await settledOrAborted(ahead, signal);
    const known = this.verifiedSha(dest, size);
    if (known) return known;
    const mine = download().then((sha) => {
      this.verified.set(dest, { sha, mtimeMs: statSync(dest).mtimeMs });
      return sha;
    });
    this.writing.set(dest, mine);
    try {
      return await mine;
    } finally {
      if (this.writing.get(dest) === mine) this.writing.delete(dest);
    }
  }
}

/** Wait until `p` settles (however it ends), or reject with `signal`'s reason when it is aborted first. */
function settledOrAborted(p: Promise<unknown>, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    void p
      .catch(() => undefined)
      .then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
  });
}
