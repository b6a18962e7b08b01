import { Duplex } from 'node:stream';
import { createWebSocketStream, type WebSocket } from 'ws';

/**
 * Byte transports a yamux Session runs on. Each is a Node Duplex; the session never looks further.
 */

/** A WebSocket as a byte stream: each write becomes one binary message; messages arrive as chunks. */
export function webSocketDuplex(ws: WebSocket): Duplex {
  ws.binaryType = 'nodebuffer';
  return createWebSocketStream(ws, { allowHalfOpen: false });
}

class PairEnd extends Duplex {
  other!: PairEnd;
  split: ((n: number) => number[]) | null = null;
  private waiting: (() => void) | null = null;

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.other.destroyed) return cb(new Error('peer closed'));
    let ok = true;
    if (this.split) {
      // Deliver the bytes cut at arbitrary places, as TCP or a proxy may.
      let off = 0;
      for (const n of this.split(chunk.byteLength)) {
        if (off >= chunk.byteLength) break;
        ok = this.other.push(chunk.subarray(off, off + n));
        off += n;
      }
      if (off < chunk.byteLength) ok = this.other.push(chunk.subarray(off));
    } else {
      ok = this.other.push(chunk);
    }
    if (ok) cb();
    else this.other.waiting = () => cb();
  }

  override _read(): void {
    const w = this.waiting;
    this.waiting = null;
    w?.();
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.other.push(null);
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (!this.other.destroyed) this.other.destroy();
    cb(err);
  }
}

/**
 * Two connected in-memory ends with socket-like backpressure (each holds at most `highWaterMark` unread).
 * `split` (tests) re-chunks every write into pieces of the sizes it returns.
 */
export function duplexPair(highWaterMark = 64 * 1024, split?: (n: number) => number[]): [Duplex, Duplex] {
  const a = new PairEnd({ highWaterMark, allowHalfOpen: false });
  const b = new PairEnd({ highWaterMark, allowHalfOpen: false });
  a.other = b;
  b.other = a;
  if (split) a.split = b.split = split;
  return [a, b];
}
