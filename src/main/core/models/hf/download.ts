import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { open, rename, rm, truncate } from 'node:fs/promises';
import { ErrorCode, RelayError, isRelayError } from '../../../../shared/errors.js';
import { hashFileInto } from '../describe.js';
import { hubError, hubHeaders, type HubAccess } from './hub-api.js';

/**
 * One file of a pull, resumable: the bytes go to `<dest>.part`, hashed as they are written; a dropped connection
 * is asked again from the byte it stopped at (`Range`, with `If-Range` on the ETag so a changed file starts
 * over), a hub restarted mid-file continues from the part on disk (whose bytes are hashed once, to carry the
 * hash on), and the finished file is renamed into place only if its sha256 is the one the repository lists.
 */
export interface DownloadTarget {
  readonly url: string;
  readonly dest: string;
  readonly size: number;
  readonly sha256: string | null;
  /** For messages. */
  readonly repo: string;
  readonly path: string;
}

export interface DownloadOptions {
  readonly access: HubAccess;
  readonly signal: AbortSignal;
  /** Bytes on disk so far (called as they arrive, and once with the part already there). */
  onBytes(have: number): void;
  /** A retry after a failure: what failed and when the next try is. */
  onRetry?(message: string, inMs: number): void;
}

/** Tries in a row that move no byte before the pull fails (resumable: pull again). */
const MAX_FAILURES = 6;
/** A connection that sends nothing for this long is dropped and asked again. */
const STALL_MS = 60_000;
const MAX_REDIRECTS = 5;

export const partOf = (dest: string): string => `${dest}.part`;

/** GET with Range from `have`, following redirects by hand: the token never goes to another origin. The answer and the URL that gave it. */
async function get(t: DownloadTarget, o: DownloadOptions, have: number, etag: string | null, signal: AbortSignal): Promise<{ r: Response; url: string }> {
  let url = t.url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const extra: Record<string, string> = have > 0 ? { range: `bytes=${have}-`, ...(etag ? { 'if-range': etag } : {}) } : {};
    const r = await fetch(url, { headers: hubHeaders(o.access, url, extra), redirect: 'manual', signal });
    const loc = r.headers.get('location');
    if (r.status >= 300 && r.status < 400 && loc) {
      await r.body?.cancel();
      url = new URL(loc, url).toString();
      continue;
    }
    return { r, url };
  }
  throw new RelayError(ErrorCode.HF_UNREACHABLE, `${t.path}: more than ${MAX_REDIRECTS} redirects`, { repo: t.repo });
}

const delay = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason as Error);
      },
      { once: true },
    );
  });

/** Download `t` (or finish it); resolves with its sha256 once `t.dest` holds the verified file. */
export async function downloadFile(t: DownloadTarget, o: DownloadOptions): Promise<string> {
  const part = partOf(t.dest);
  let have = existsSync(part) ? statSync(part).size : 0;
  let hash = createHash('sha256');
  if (have > t.size) {
    await truncate(part, 0);
    have = 0;
  } else if (have > 0) {
    await hashFileInto(part, hash);
  }
  o.onBytes(have);
  let etag: string | null = null;
  let failures = 0;
  while (have < t.size) {
    o.signal.throwIfAborted();
    const attempt = new AbortController();
    const onAbort = (): void => attempt.abort(o.signal.reason);
    o.signal.addEventListener('abort', onAbort, { once: true });
    let stall: NodeJS.Timeout | null = null;
    const arm = (): void => {
      if (stall) clearTimeout(stall);
      stall = setTimeout(() => attempt.abort(new Error(`no byte for ${STALL_MS / 1000} s`)), STALL_MS);
    };
    const before = have;
    try {
      arm();
      const { r, url } = await get(t, o, have, etag, attempt.signal);
      if (r.status === 416 && have === t.size) break;
      if (!r.ok) {
        // Only the Hub itself saying no (gated, gone) is final. A hiccup, or a file server's refusal (an expired
        // signed link, a CDN's 403/404), is tried again from the resolve URL, with what reached the disk kept.
        const fromHub = new URL(url).origin === new URL(o.access.endpoint).origin;
        if (r.status >= 500 || r.status === 408 || r.status === 429 || !fromHub) throw new Error(`${r.status} from ${new URL(url).host}`);
        throw hubError(r.status, r.headers.get('x-error-code'), t.repo, o.access, t.path);
      }
      const fromStart = r.status === 200;
      if (fromStart && have > 0) {
        // The server ignored the Range (or the file changed under its ETag): start over.
        await truncate(part, 0);
        have = 0;
        hash = createHash('sha256');
        o.onBytes(0);
      }
      etag = r.headers.get('etag') ?? r.headers.get('x-linked-etag') ?? etag;
      if (!r.body) throw new Error('an empty answer');
      const fh = await open(part, 'a');
      try {
        for await (const chunk of r.body as AsyncIterable<Uint8Array>) {
          arm();
          if (have + chunk.byteLength > t.size) throw new RelayError(ErrorCode.HASH_MISMATCH, `${t.path}: the server sent more than the ${t.size} bytes the repository lists`, { repo: t.repo });
          await fh.write(chunk);
          hash.update(chunk);
          have += chunk.byteLength;
          o.onBytes(have);
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      if (have < t.size) throw new Error(`the connection ended at byte ${have} of ${t.size}`);
    } catch (err) {
      if (o.signal.aborted) throw o.signal.reason as Error;
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') {
        throw new RelayError(ErrorCode.DISK_FULL, `the disk holding ${part} is full at ${have} of ${t.size} bytes: free some space and pull again (it resumes)`, { path: part });
      }
      if (isRelayError(err)) throw err;
      failures = have > before ? 1 : failures + 1;
      const message = err instanceof Error ? ((err.cause as Error | undefined)?.message ?? err.message) : String(err);
      if (failures >= MAX_FAILURES) {
        throw new RelayError(ErrorCode.HF_UNREACHABLE, `${t.path}: the download failed ${failures} times in a row at byte ${have} of ${t.size} (${message}); pull again to resume`, {
          repo: t.repo,
          have,
        });
      }
      const wait = failures === 1 ? 0 : Math.min(30_000, 500 * 2 ** failures);
      o.onRetry?.(message, wait);
      if (wait > 0) await delay(wait, o.signal);
    } finally {
      if (stall) clearTimeout(stall);
      o.signal.removeEventListener('abort', onAbort);
    }
  }
  const got = hash.digest('hex');
  // What is renamed into place is what was hashed: the part holds exactly the bytes written here (one writer per
  // file: pulls.ts), and its size on disk is the listed one.
  const onDisk = statSync(part).size;
  if (onDisk !== t.size) {
    await rm(part, { force: true });
    throw new RelayError(ErrorCode.HASH_MISMATCH, `${t.path} from ${t.repo}: ${onDisk} bytes on disk where the repository lists ${t.size}: deleted, nothing registered`, { repo: t.repo });
  }
  if (t.sha256 && got !== t.sha256) {
    await rm(part, { force: true });
    throw new RelayError(ErrorCode.HASH_MISMATCH, `${t.path} from ${t.repo} does not hash to the sha256 the repository lists (${t.sha256}, got ${got}): deleted, nothing registered`, {
      repo: t.repo,
      expected: t.sha256,
      got,
    });
  }
  await rename(part, t.dest);
  return got;
}
