/** The worker of GrowingFileHash: hash a file as far as the writer says it is written, answer at its end. */
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

const { path } = workerData as { path: string };
const h = createHash('sha256');
const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
let fd: number | null = null; // opened once there is something to read (the writer may not have made the file yet)
let pos = 0;
let known = 0;
let end = -1;

function pump(): void {
  while (pos < known) {
    fd ??= openSync(path, 'r');
    const n = readSync(fd, buf, 0, Math.min(buf.length, known - pos), pos);
    if (n <= 0) break;
    h.update(buf.subarray(0, n));
    pos += n;
  }
  if (end >= 0 && pos >= end) {
    if (fd !== null) closeSync(fd);
    parentPort!.postMessage(pos === end ? { hex: h.digest('hex') } : { error: `read ${pos} bytes, expected ${end}` });
    parentPort!.close();
  }
}

parentPort!.on('message', (m: { flushed?: number; end?: number }) => {
  try {
    if (m.flushed !== undefined) known = Math.max(known, m.flushed);
    if (m.end !== undefined) {
      end = m.end;
      known = Math.max(known, m.end);
    }
    pump();
  } catch (err) {
    parentPort!.postMessage({ error: (err as Error).message });
    parentPort!.close();
  }
});
