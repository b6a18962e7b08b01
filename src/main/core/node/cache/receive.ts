import { existsSync, rmSync, statSync } from 'node:fs';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { appendWriter, GrowingFileHash } from './growing-hash.js';
import { renameIntoPlace } from './windows-files.js';

/**
 * A push's bytes [offset, size) of `sha256` appended to its partial file `part`, hashed as they land, then moved to
 * `target` once the whole file hashes to its name. A short stream leaves the partial file for the next attempt; a
 * wrong hash deletes it (HASH_MISMATCH); a full disk deletes it (DISK_FULL); more bytes than `size` are refused.
 */
export async function receivePush(src: Readable, part: string, target: string, sha256: string, offset: number, size: number, onProgress?: (done: number) => void): Promise<void> {
  let written = offset;
  const guard = new Transform({
    transform(chunk: Buffer, _e, cb) {
      if (written + chunk.byteLength > size) return cb(new RelayError(ErrorCode.INVALID_REQUEST, `push of ${sha256.slice(0, 12)}… sent more than ${size} bytes`));
      written += chunk.byteLength;
      onProgress?.(written);
      cb(null, chunk);
    },
  });
  // Written with backpressure (the event loop keeps serving the tunnel while the disk works) and hashed by a
  // worker that follows the writer, so the file is verified when its last byte lands.
  const hash = new GrowingFileHash(part);
  hash.flushed(offset);
  let told = offset;
  const onFlushed = (n: number): void => {
    if (n - told < 4 * 1024 * 1024) return; // a message per 4 MiB; finish() covers the rest
    hash.flushed(n);
    told = n;
  };
  try {
    // (A plain for-await on the stream would destroy it at its end, and the node still answers on it.)
    await pipeline(src.iterator({ destroyOnReturn: false }), guard, appendWriter(part, offset, onFlushed));
  } catch (err) {
    hash.cancel();
    if ((err as NodeJS.ErrnoException).code === 'ENOSPC') {
      rmSync(part, { force: true });
      throw new RelayError(ErrorCode.DISK_FULL, `the node's disk is full while writing ${sha256.slice(0, 12)}…; the partial file was removed`);
    }
    throw err;
  }
  const onDisk = existsSync(part) ? statSync(part).size : 0;
  if (onDisk < size) {
    hash.cancel();
    throw new RelayError(ErrorCode.PUSH_INCOMPLETE, `push of ${sha256.slice(0, 12)}… stopped at ${onDisk} of ${size} bytes; it resumes from there`);
  }
  const got = await hash.finish(size);
  if (got !== sha256) {
    rmSync(part, { force: true });
    throw new RelayError(ErrorCode.HASH_MISMATCH, `pushed bytes hash to ${got.slice(0, 12)}…, not ${sha256.slice(0, 12)}…; the partial file was removed`);
  }
  renameIntoPlace(part, target, `push of ${sha256.slice(0, 12)}…`);
}
