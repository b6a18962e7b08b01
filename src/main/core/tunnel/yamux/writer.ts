import type { Duplex } from 'node:stream';
import { encodeHeader, Flag, FrameType } from './frame.js';
import { BulkPacer, STREAM_FLOOR, type LinkMeasure } from './pacer.js';
import { stateOf, type StreamState, type YamuxStream } from './stream.js';

type Frame = Buffer[];

/** Payloads at least this big are written to the transport as they are, not copied into a batch. */
const ZERO_COPY_BYTES = 16 * 1024;

/**
 * A session's sending side: control frames first, then DATA frames from the streams that have something to
 * send, most urgent priority level first and round-robin within one, cut to the peer's window and the
 * frame size, coalesced into few transport writes, with at most maxQueuedBytes waiting in the transport.
 */
export class FrameWriter {
  private readonly control: Frame[] = [];
  /** Streams with something to send, one set per priority level. */
  private readonly ready: Set<YamuxStream>[];
  /** Bulk streams' bytes in flight (pacer.ts), and the bulk streams waiting for room under it. */
  private readonly pacer = new BulkPacer();
  private readonly pacedWaiting = new Set<YamuxStream>();
  private pumping = false;
  private waitingDrain = false;
  private stopped = false;

  constructor(
    private readonly transport: Duplex,
    private readonly opts: { readonly [K in 'priorityLevels' | 'maxControlFrames' | 'maxFrameBytes' | 'maxQueuedBytes' | 'maxBatchBytes']: number },
    private readonly stats: { framesOut: number; bytesOut: number },
    private readonly deps: { onFinished(s: YamuxStream): void; onFlushed(): void },
  ) {
    this.ready = Array.from({ length: opts.priorityLevels }, () => new Set());
    transport.on('drain', () => {
      this.waitingDrain = false;
      this.pump();
    });
  }

  /** Nothing queued here and the transport is not backed up. */
  get idle(): boolean {
    return this.control.length === 0 && !this.waitingDrain;
  }

  get queuedControlFrames(): number {
    return this.control.length;
  }

  /** The stream is gone: it sends nothing more. */
  drop(s: YamuxStream): void {
    for (const set of this.ready) set.delete(s);
    const st = stateOf(s);
    this.pacer.forget(st.unacked);
    st.unacked = 0;
    this.pacedWaiting.delete(s);
    this.wakePaced(); // its bytes no longer count: the others may have room now
  }

  /** The link as the pacer measured it (pacer.ts link). */
  link(): LinkMeasure {
    return this.pacer.link();
  }

  /** A ping came back in `ms`: the link's round trip, for the pacer. */
  sawRtt(ms: number): void {
    this.pacer.sawRtt(ms);
  }

  /** The peer returned `n` bytes of window to paced stream `s`: they left the link; waiting bulk streams may go on. */
  returned(s: YamuxStream, n: number): void {
    const st = stateOf(s);
    const r = Math.min(n, st.unacked);
    st.unacked -= r;
    this.pacer.returned(r);
    this.wakePaced();
  }

  private wakePaced(): void {
    if (this.pacedWaiting.size === 0) return;
    for (const w of this.pacedWaiting) {
      this.pacedWaiting.delete(w);
      if (!this.stopped && !stateOf(w).reset) this.ready[Math.min(this.opts.priorityLevels - 1, Math.max(0, w.priority))]!.add(w);
    }
    this.pump();
  }

  /** What `st` may send now: the peer's window, and for a bulk stream the pacer's room (at least its own floor). */
  private room(st: StreamState): number {
    return st.paced ? Math.min(st.sendWindow, Math.max(this.pacer.room(), STREAM_FLOOR - st.unacked)) : st.sendWindow;
  }

  /** The session is dead: nothing more is written. */
  stop(): void {
    this.stopped = true;
    for (const set of this.ready) set.clear();
    this.control.length = 0;
  }

  /** Queue a control frame ahead of all data; false when the peer has left too many unread (the caller ends the session). */
  sendControl(type: number, flags: number, id: number, length: number): boolean {
    if (this.control.length >= this.opts.maxControlFrames) return false;
    this.control.push([encodeHeader(type, flags, id, length)]);
    this.pump();
    return true;
  }

  /** `s` has data or a FIN to send. */
  schedule(s: YamuxStream): void {
    if (this.stopped || stateOf(s).reset) return;
    this.ready[Math.min(this.opts.priorityLevels - 1, Math.max(0, s.priority))]!.add(s);
    this.pump();
  }

  /** The next DATA frame from the most urgent ready stream (round-robin within a level), or null. */
  private nextDataFrame(): Frame | null {
    for (const set of this.ready) {
      for (const s of set) {
        set.delete(s);
        const f = this.frameFrom(s);
        if (f) {
          const st = stateOf(s);
          if (st.pending.length > 0 || st.finPending) {
            if (this.room(st) > 0 || (st.pending.length === 0 && st.finPending))
              set.add(s); // to the back of its level
            else if (st.sendWindow > 0) this.pacedWaiting.add(s); // resumes when the pacer has room
          }
          return f;
        }
      }
    }
    return null;
  }

  private frameFrom(s: YamuxStream): Frame | null {
    const st = stateOf(s);
    if (st.reset) return null;
    const w = st.pending[0];
    if (w) {
      const room = this.room(st);
      if (room <= 0) {
        if (st.sendWindow > 0) this.pacedWaiting.add(s); // resumes when the pacer has room
        return null; // or on WINDOW_UPDATE
      }
      const n = Math.min(w.chunk.byteLength - w.offset, room, this.opts.maxFrameBytes);
      const payload = w.chunk.subarray(w.offset, w.offset + n);
      w.offset += n;
      st.sendWindow -= n;
      st.bytesWritten += n;
      if (st.paced) {
        st.unacked += n;
        this.pacer.sent(n);
      }
      let flags = st.openFlags;
      st.openFlags = 0;
      if (w.offset === w.chunk.byteLength) {
        st.pending.shift();
        // The chunk is in the transport's queue (bounded by maxQueued): accept the next one.
        queueMicrotask(() => w.cb());
      }
      if (st.pending.length === 0 && st.finPending) flags |= this.takeFin(s);
      return [encodeHeader(FrameType.DATA, flags, s.id, n), payload];
    }
    if (st.finPending) {
      const flags = st.openFlags | this.takeFin(s);
      st.openFlags = 0;
      return [encodeHeader(FrameType.WINDOW_UPDATE, flags, s.id, 0)];
    }
    return null;
  }

  private takeFin(s: YamuxStream): number {
    const st = stateOf(s);
    const cb = st.finPending!;
    st.finPending = null;
    st.localClosed = true;
    queueMicrotask(() => cb());
    if (st.finished) this.deps.onFinished(s);
    return Flag.FIN;
  }

  pump(): void {
    if (this.pumping || this.waitingDrain || this.stopped) return;
    this.pumping = true;
    try {
      while (!this.stopped) {
        if (this.transport.writableLength >= this.opts.maxQueuedBytes) {
          this.waitingDrain = true;
          return;
        }
        // Coalesce headers, control frames and small payloads into one transport write (one WebSocket
        // message); a large payload goes out as its own write, uncopied (yamux is a byte stream: where the
        // transport cuts it does not matter).
        const batch: Buffer[] = [];
        let small = 0;
        let bytes = 0;
        let ok = true;
        const flushSmall = (): void => {
          if (batch.length === 0) return;
          ok = this.transport.write(batch.length === 1 ? batch[0] : Buffer.concat(batch, small)) && ok;
          batch.length = 0;
          small = 0;
        };
        while (bytes < this.opts.maxBatchBytes) {
          const f = this.control.shift() ?? this.nextDataFrame();
          if (!f) break;
          for (const b of f) {
            if (b.byteLength >= ZERO_COPY_BYTES) {
              flushSmall();
              ok = this.transport.write(b) && ok;
            } else {
              batch.push(b);
              small += b.byteLength;
            }
            bytes += b.byteLength;
          }
          this.stats.framesOut++;
        }
        flushSmall();
        if (bytes === 0) {
          this.deps.onFlushed();
          return;
        }
        this.stats.bytesOut += bytes;
        if (!ok) {
          this.waitingDrain = true;
          return;
        }
      }
    } finally {
      this.pumping = false;
    }
  }
}
