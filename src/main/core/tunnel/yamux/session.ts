import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import {
  encodeHeader, Flag, FrameDecoder, FrameType, GoAwayCode, HEADER_BYTES, INITIAL_WINDOW, ProtocolError, type FrameHeader,
} from './frame.js';

/**
 * A focused yamux (hashicorp spec) over any Node Duplex: a WebSocket stream, a TCP socket, an in-memory pair.
 *
 * Why not the published packages: yamux-js drops split frames and has no flow control (../TUNNEL-NOTES.md);
 * libp2p's yamux needs polyfills on Node 20 and buffers without bound unless drained just so. This one is a
 * few hundred lines with the two properties relay needs:
 *  - receive flow control: a stream's unread bytes never exceed its window, so a slow reader costs at most
 *    `streamWindow` of memory and stalls only its own sender;
 *  - a writer that keeps the transport's queue short and picks the next frame by priority (control frames,
 *    then streams by their `priority`, round-robin within one), so an rpc frame never waits behind megabytes
 *    of a weight push already queued in the socket.
 */
export interface SessionOptions {
  /** Client opens odd stream ids, server even (the spec). */
  readonly client: boolean;
  /** Receive window per stream (≥ 256 KiB); advertised to the peer on SYN/ACK. */
  readonly streamWindow?: number;
  /** Bytes the writer lets sit in the transport's own queue before it waits for 'drain'. */
  readonly maxQueuedBytes?: number;
  /**
   * Largest DATA payload this side sends in one frame (256 KiB: each payload goes to the transport uncopied,
   * so bigger frames mean fewer WebSocket messages; an rpc frame still waits behind at most one of them).
   */
  readonly maxFrameBytes?: number;
  /** Most bytes of frames coalesced into one transport write. */
  readonly maxBatchBytes?: number;
  /** Ping period and how long a ping may go unanswered before the session is declared dead; 0 disables. */
  readonly keepAliveIntervalMs?: number;
  readonly keepAliveTimeoutMs?: number;
  /** Most streams open at once; more SYNs are refused with RST. */
  readonly maxStreams?: number;
  /**
   * Control frames (window updates, ping answers, resets) that may wait for a transport that is not draining;
   * a peer that floods pings or opens streams without reading is disconnected past this (TUNNEL_OVERLOAD).
   */
  readonly maxControlFrames?: number;
}

/** Payloads at least this big are written to the transport as they are, not copied into a batch. */
const ZERO_COPY_BYTES = 16 * 1024;

export const PRIORITY = { control: 0, rpc: 1, http: 2, file: 3 } as const;
const LEVELS = 4;

interface PendingWrite {
  chunk: Buffer;
  offset: number;
  cb: (err?: Error | null) => void;
}

export class YamuxStream extends Duplex {
  readonly id: number;
  /** 0 = most urgent. May be changed once the stream's purpose is known (the acceptor learns it from a header). */
  priority: number = PRIORITY.http;
  /** Opaque tag for the layer above (stream kind). */
  kind: string | null = null;
  sendWindow = INITIAL_WINDOW;
  recvWindow = INITIAL_WINDOW;
  readonly pending: PendingWrite[] = [];
  finPending: ((err?: Error | null) => void) | null = null;
  localClosed = false;
  remoteClosed = false;
  reset = false;
  /** Set when the SYN (opener) or ACK (acceptor) still has to ride on this stream's first frame. */
  openFlags: number;
  bytesRead = 0;
  bytesWritten = 0;

  constructor(
    private readonly session: Session,
    id: number,
    openFlags: number,
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: session.streamWindow, writableHighWaterMark: 64 * 1024 });
    this.id = id;
    this.openFlags = openFlags;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.reset) return cb(new RelayError(ErrorCode.STREAM_RESET, `stream ${this.id} was reset`));
    this.pending.push({ chunk, offset: 0, cb });
    this.session.schedule(this);
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.reset) return cb();
    this.finPending = cb;
    this.session.schedule(this);
  }

  override _read(): void {
    this.session.maybeGrant(this);
  }

  /**
   * Every consumption path (pipe, 'data' in flowing mode, async iteration) goes through read(); _read alone is
   * not enough, Node calls it once and then waits for a push that cannot come before we grant window.
   */
  override read(size?: number): unknown {
    const r: unknown = super.read(size);
    this.session.maybeGrant(this);
    return r;
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.session.onStreamDestroyed(this, err);
    cb(err);
  }

  // A stream stands in for a socket under node:http (the hub's agent for node replicas): these are no-ops.
  setTimeout(_ms: number, cb?: () => void): this {
    if (cb) this.once('timeout', cb);
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }

  /** True once nothing more can flow either way: the session forgets the stream then. */
  get finished(): boolean {
    return this.reset || (this.localClosed && this.remoteClosed);
  }
}

type Frame = Buffer[];

export class Session extends EventEmitter {
  readonly streamWindow: number;
  private readonly maxQueued: number;
  private readonly maxFrame: number;
  /** Frames coalesced into one transport write (one WebSocket message). */
  private readonly maxBatch: number;
  private readonly maxStreams: number;
  private readonly maxControlFrames: number;
  private readonly streams = new Map<number, YamuxStream>();
  private nextId: number;
  private readonly control: Frame[] = [];
  private readonly ready: Set<YamuxStream>[] = Array.from({ length: LEVELS }, () => new Set());
  private readonly decoder: FrameDecoder;
  private pumping = false;
  private waitingDrain = false;
  private localGoAway = false;
  private remoteGoAway = false;
  private dead: Error | null = null;
  private pingId = 0;
  private readonly pings = new Map<number, { t0: number; resolve: (ms: number) => void; timer: NodeJS.Timeout }>();
  private keepAliveTimer: NodeJS.Timeout | null = null;
  /** Counters for tests and /status. */
  readonly stats = { streamsOpened: 0, streamsAccepted: 0, framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };

  constructor(
    private readonly transport: Duplex,
    private readonly opts: SessionOptions,
  ) {
    super();
    this.streamWindow = Math.max(INITIAL_WINDOW, opts.streamWindow ?? 1024 * 1024);
    this.maxQueued = opts.maxQueuedBytes ?? 128 * 1024;
    this.maxFrame = opts.maxFrameBytes ?? 256 * 1024;
    this.maxBatch = Math.max(this.maxFrame + HEADER_BYTES, opts.maxBatchBytes ?? 256 * 1024);
    this.maxStreams = opts.maxStreams ?? 4096;
    this.maxControlFrames = opts.maxControlFrames ?? 4096;
    this.nextId = opts.client ? 1 : 2;
    this.decoder = new FrameDecoder((h) => {
      const s = this.streams.get(h.streamId);
      // A SYN-carrying DATA frame may use the initial window; a known stream its current one.
      return s ? s.recvWindow : INITIAL_WINDOW;
    });
    transport.on('data', (chunk: Buffer) => this.onData(chunk));
    transport.on('drain', () => {
      this.waitingDrain = false;
      this.pump();
    });
    transport.on('error', (err: Error) => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, `tunnel transport failed: ${err.message}`)));
    transport.on('close', () => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'tunnel transport closed')));
    transport.on('end', () => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'tunnel transport ended')));
    const interval = opts.keepAliveIntervalMs ?? 15_000;
    if (interval > 0) {
      this.keepAliveTimer = setInterval(() => {
        this.ping(opts.keepAliveTimeoutMs ?? 30_000).catch((err: Error) => this.destroy(err));
      }, interval);
      this.keepAliveTimer.unref();
    }
  }

  get closed(): boolean {
    return this.dead !== null;
  }

  get streamCount(): number {
    return this.streams.size;
  }

  /** Open an outbound stream. Its SYN goes out at once (so the peer can accept before any data). */
  open(priority: number = PRIORITY.http): YamuxStream {
    if (this.dead) throw new RelayError(ErrorCode.SESSION_CLOSED, `the tunnel is closed: ${this.dead.message}`);
    if (this.remoteGoAway || this.localGoAway) throw new RelayError(ErrorCode.SESSION_CLOSED, 'the tunnel is going away: no new streams');
    if (this.nextId > 0xffffffff) throw new RelayError(ErrorCode.SESSION_CLOSED, 'stream ids exhausted');
    const id = this.nextId;
    this.nextId += 2;
    const s = new YamuxStream(this, id, 0);
    s.priority = priority;
    this.streams.set(id, s);
    this.stats.streamsOpened++;
    this.sendControl(FrameType.WINDOW_UPDATE, Flag.SYN, id, this.streamWindow - INITIAL_WINDOW);
    s.recvWindow = this.streamWindow;
    return s;
  }

  /** Round-trip time of one ping. */
  ping(timeoutMs = 10_000): Promise<number> {
    if (this.dead) return Promise.reject(this.dead);
    const id = (this.pingId = (this.pingId + 1) >>> 0);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pings.delete(id);
        reject(new RelayError(ErrorCode.KEEPALIVE_TIMEOUT, `the tunnel peer did not answer a ping within ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref();
      this.pings.set(id, { t0: performance.now(), resolve, timer });
      this.sendControl(FrameType.PING, Flag.SYN, 0, id);
    });
  }

  /** Tell the peer no new streams will be accepted; existing ones finish. */
  goAway(code: number = GoAwayCode.NORMAL): void {
    if (this.localGoAway || this.dead) return;
    this.localGoAway = true;
    this.sendControl(FrameType.GO_AWAY, 0, 0, code);
  }

  /** Graceful: GO_AWAY, flush what is queued, then end the transport. Idempotent. */
  close(): void {
    if (this.dead) return;
    this.goAway(GoAwayCode.NORMAL);
    const finish = (): void => {
      // Destroy only once the transport has flushed (a TLS socket destroyed at once drops what it had not yet
      // encrypted and sent: the peer would never read the GO_AWAY or the last message); a peer that never
      // reads is cut after 5 s.
      const done = (): void => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'the tunnel was closed'));
      const t = setTimeout(done, 5000);
      t.unref();
      this.transport.end(() => {
        clearTimeout(t);
        done();
      });
    };
    if (this.control.length === 0 && !this.waitingDrain) finish();
    else this.once('flushed', finish);
  }

  /** Force: every stream fails with `err`, the transport is destroyed. Idempotent. */
  destroy(err: Error = new RelayError(ErrorCode.SESSION_CLOSED, 'the tunnel was closed')): void {
    if (this.dead) return;
    this.dead = err;
    if (this.keepAliveTimer) clearInterval(this.keepAliveTimer);
    for (const p of this.pings.values()) clearTimeout(p.timer);
    this.pings.clear();
    for (const s of [...this.streams.values()]) {
      s.reset = true;
      s.destroy(new RelayError(ErrorCode.SESSION_CLOSED, `tunnel lost: ${err.message}`));
    }
    this.streams.clear();
    for (const set of this.ready) set.clear();
    this.control.length = 0;
    this.transport.destroy();
    this.emit('close', err);
  }

  // ---- receiving ----

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.stats.bytesIn += chunk.byteLength;
    try {
      this.decoder.push(chunk, (h, payload) => this.onFrame(h, payload));
    } catch (err) {
      if (err instanceof ProtocolError) {
        this.sendControl(FrameType.GO_AWAY, 0, 0, GoAwayCode.PROTOCOL_ERROR);
        this.destroy(new RelayError(ErrorCode.TUNNEL_PROTOCOL, `tunnel protocol error: ${err.message}`));
      } else {
        this.destroy(err as Error);
      }
    }
  }

  private onFrame(h: FrameHeader, payload: Buffer | null): void {
    this.stats.framesIn++;
    switch (h.type) {
      case FrameType.PING:
        if (h.flags & Flag.SYN) this.sendControl(FrameType.PING, Flag.ACK, 0, h.length);
        else if (h.flags & Flag.ACK) {
          const p = this.pings.get(h.length);
          if (p) {
            clearTimeout(p.timer);
            this.pings.delete(h.length);
            p.resolve(performance.now() - p.t0);
          }
        }
        return;
      case FrameType.GO_AWAY:
        this.remoteGoAway = true;
        this.emit('goaway', h.length);
        if (h.length !== GoAwayCode.NORMAL) {
          this.destroy(new RelayError(ErrorCode.TUNNEL_PROTOCOL, `the peer went away with error code ${h.length}`));
        }
        return;
      default:
        this.onStreamFrame(h, payload);
    }
  }

  private onStreamFrame(h: FrameHeader, payload: Buffer | null): void {
    let s = this.streams.get(h.streamId);
    if (h.flags & Flag.SYN) {
      if (s) throw new ProtocolError(`duplicate SYN for stream ${h.streamId}`);
      if ((h.streamId % 2 === 1) === this.opts.client || h.streamId === 0) throw new ProtocolError(`peer opened stream ${h.streamId} with our parity`);
      // Refused, not buffered: over the cap, going away, or nobody listening for streams yet (a peer that opens
      // streams before its session is wired up would otherwise park a window of data in each).
      if (this.localGoAway || this.streams.size >= this.maxStreams || this.listenerCount('stream') === 0) {
        this.sendControl(FrameType.WINDOW_UPDATE, Flag.RST, h.streamId, 0);
        return;
      }
      s = new YamuxStream(this, h.streamId, Flag.ACK);
      this.streams.set(h.streamId, s);
      this.stats.streamsAccepted++;
      // ACK now, with our larger window: the opener may be waiting to learn the stream exists.
      this.sendControl(FrameType.WINDOW_UPDATE, Flag.ACK, h.streamId, this.streamWindow - INITIAL_WINDOW);
      s.openFlags = 0;
      s.recvWindow = this.streamWindow;
      this.emit('stream', s);
    }
    if (!s) return; // a late frame for a stream we already forgot: nothing to do
    if (h.flags & Flag.RST) {
      s.reset = true;
      this.forget(s);
      s.destroy(new RelayError(ErrorCode.STREAM_RESET, `stream ${s.id} was reset by the peer`));
      return;
    }
    if (h.type === FrameType.WINDOW_UPDATE && h.length > 0) {
      const was = s.sendWindow;
      s.sendWindow += h.length;
      if (was === 0 && (s.pending.length > 0 || s.finPending)) this.schedule(s);
    }
    if (h.type === FrameType.DATA && payload) {
      if (payload.byteLength > s.recvWindow) throw new ProtocolError(`stream ${s.id} overran its window`);
      s.recvWindow -= payload.byteLength;
      s.bytesRead += payload.byteLength;
      if (!s.remoteClosed) s.push(payload);
      this.maybeGrant(s);
    }
    if (h.flags & Flag.FIN && !s.remoteClosed) {
      s.remoteClosed = true;
      s.push(null);
      if (s.finished) this.forget(s);
    }
  }

  /** Return window to the peer once the reader has consumed half of it (hashicorp's rule). */
  maybeGrant(s: YamuxStream): void {
    if (s.reset || s.remoteClosed || this.dead) return;
    const delta = this.streamWindow - s.recvWindow - s.readableLength;
    if (delta >= this.streamWindow / 2) {
      s.recvWindow += delta;
      this.sendControl(FrameType.WINDOW_UPDATE, 0, s.id, delta);
    }
  }

  // ---- sending ----

  private sendControl(type: number, flags: number, id: number, length: number): void {
    if (this.dead) return;
    if (this.control.length >= this.maxControlFrames) {
      this.destroy(new RelayError(ErrorCode.TUNNEL_OVERLOAD, `the tunnel peer does not read: ${this.control.length} control frames queued`));
      return;
    }
    this.control.push([encodeHeader(type, flags, id, length)]);
    this.pump();
  }

  schedule(s: YamuxStream): void {
    if (this.dead || s.reset) return;
    this.ready[Math.min(LEVELS - 1, Math.max(0, s.priority))]!.add(s);
    this.pump();
  }

  /** The next DATA frame from the most urgent ready stream (round-robin within a level), or null. */
  private nextDataFrame(): Frame | null {
    for (const set of this.ready) {
      for (const s of set) {
        set.delete(s);
        const f = this.frameFrom(s);
        if (f) {
          if (s.pending.length > 0 || s.finPending) {
            if (s.sendWindow > 0 || (s.pending.length === 0 && s.finPending)) set.add(s); // to the back of its level
          }
          return f;
        }
      }
    }
    return null;
  }

  private frameFrom(s: YamuxStream): Frame | null {
    if (s.reset) return null;
    const w = s.pending[0];
    if (w) {
      if (s.sendWindow === 0) return null; // resumes on WINDOW_UPDATE
      const n = Math.min(w.chunk.byteLength - w.offset, s.sendWindow, this.maxFrame);
      const payload = w.chunk.subarray(w.offset, w.offset + n);
      w.offset += n;
      s.sendWindow -= n;
      s.bytesWritten += n;
      let flags = s.openFlags;
      s.openFlags = 0;
      if (w.offset === w.chunk.byteLength) {
        s.pending.shift();
        // The chunk is in the transport's queue (bounded by maxQueued): accept the next one.
        queueMicrotask(() => w.cb());
      }
      if (s.pending.length === 0 && s.finPending) flags |= this.takeFin(s);
      return [encodeHeader(FrameType.DATA, flags, s.id, n), payload];
    }
    if (s.finPending) {
      const flags = s.openFlags | this.takeFin(s);
      s.openFlags = 0;
      return [encodeHeader(FrameType.WINDOW_UPDATE, flags, s.id, 0)];
    }
    return null;
  }

  private takeFin(s: YamuxStream): number {
    const cb = s.finPending!;
    s.finPending = null;
    s.localClosed = true;
    queueMicrotask(() => cb());
    if (s.finished) this.forget(s);
    return Flag.FIN;
  }

  private pump(): void {
    if (this.pumping || this.waitingDrain || this.dead) return;
    this.pumping = true;
    try {
      while (!this.dead) {
        if (this.transport.writableLength >= this.maxQueued) {
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
        while (bytes < this.maxBatch) {
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
          this.emit('flushed');
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

  // ---- stream bookkeeping ----

  private forget(s: YamuxStream): void {
    this.streams.delete(s.id);
    for (const set of this.ready) set.delete(s);
  }

  onStreamDestroyed(s: YamuxStream, _err: Error | null): void {
    if (!s.finished && !this.dead) {
      // Destroyed locally before a clean close both ways: tell the peer.
      s.reset = true;
      this.sendControl(FrameType.WINDOW_UPDATE, Flag.RST, s.id, 0);
    }
    s.reset = s.reset || !s.finished;
    for (const w of s.pending.splice(0)) queueMicrotask(() => w.cb(new RelayError(ErrorCode.STREAM_RESET, `stream ${s.id} was destroyed`)));
    this.forget(s);
  }
}
