import { open, writev, close } from 'node:fs';
import { Writable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import { workerUrl } from '../../app-files.js';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * The sha256 of a file while it is being written, computed by a worker thread that follows the writer: the
 * writer says how many bytes are on disk, the worker reads them back (from the page cache) and hashes them.
 * A push is then verified the moment its last byte is written, with no second pass over the file and no
 * hashing on the event loop that carries the tunnel. The bytes already on disk (a resumed push) are hashed
 * first.
 */
export class GrowingFileHash {
  private readonly worker: Worker;
  private readonly digest: Promise<string>;

  constructor(path: string) {
    this.worker = new Worker(workerUrl('growing-hash'), { workerData: { path } });
    this.digest = new Promise((resolve, reject) => {
      this.worker.once('message', (m: { hex?: string; error?: string }) => (m.hex ? resolve(m.hex) : reject(new RelayError(ErrorCode.IO_ERROR, `hashing ${path}: ${m.error}`))));
      this.worker.once('error', (err) => reject(new RelayError(ErrorCode.IO_ERROR, `hashing ${path}: ${err.message}`)));
      this.worker.once('exit', () => reject(new RelayError(ErrorCode.IO_ERROR, `hashing ${path}: the worker stopped`)));
    });
    this.digest.catch(() => undefined); // observed by finish(); a cancelled hash is nobody's error
  }

  /** `bytes` of the file (from its start) are written and may be read. */
  flushed(bytes: number): void {
    this.worker.postMessage({ flushed: bytes });
  }

  /** The file is `size` bytes: its sha256 (hex) once the worker has read them all. */
  async finish(size: number): Promise<string> {
    this.worker.postMessage({ end: size });
    try {
      return await this.digest;
    } finally {
      void this.worker.terminate();
    }
  }

  cancel(): void {
    void this.worker.terminate();
  }
}

/**
 * A Writable that appends to `path` with vectored writes and reports the bytes on disk after each one
 * (for GrowingFileHash). `start`: the file's length before (a resumed push).
 */
export function appendWriter(path: string, start: number, onFlushed: (bytes: number) => void): Writable {
  let fd: number | null = null;
  let onDisk = start;
  const writeAll = (bufs: Buffer[], cb: (err?: Error | null) => void): void => {
    writev(fd!, bufs, (err, n) => {
      if (err) return cb(err);
      onDisk += n;
      onFlushed(onDisk);
      // A short write (rare on regular files): write what is left.
      let skip = n;
      const rest: Buffer[] = [];
      for (const b of bufs) {
        if (skip >= b.byteLength) skip -= b.byteLength;
        else {
          rest.push(b.subarray(skip));
          skip = 0;
        }
      }
      if (rest.length === 0) cb();
      else writeAll(rest, cb);
    });
  };
  return new Writable({
    highWaterMark: 4 * 1024 * 1024,
    construct(cb) {
      open(path, 'a', (err, f) => {
        fd = f;
        cb(err);
      });
    },
    writev(chunks, cb) {
      writeAll(
        chunks.map((c) => c.chunk as Buffer),
        cb,
      );
    },
    final(cb) {
      close(fd!, (err) => {
        fd = null;
        cb(err);
      });
    },
    destroy(err, cb) {
      if (fd === null) return cb(err);
      close(fd, () => cb(err));
    },
  });
}
