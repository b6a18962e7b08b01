import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { Flag, FrameDecoder, FrameType, GoAwayCode, HEADER_BYTES, INITIAL_WINDOW, ProtocolError, type FrameHeader } from './frame.js';
import { stateOf, YamuxStream, type StreamOwner } from './stream.js';
import { GRANT_STEP, type LinkMeasure } from './pacer.js';
import { Pings } from './pings.js';
import { FrameWriter } from './writer.js';

export { YamuxStream } from './stream.js';

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
   * How many priority levels the writer serves, most urgent (0) first, round-robin within one. The layer above
   * decides what a level means (relay's tunnel: control, rpc, http, file — tunnel/channel.ts).
   */
  readonly priorityLevels?: number;
  /**
   * Control frames (window updates, ping answers, resets) that may wait for a transport that is not draining;
   * a peer that floods pings or opens streams without reading is disconnected past this (TUNNEL_OVERLOAD).
   */
  readonly maxControlFrames?: number;
}

/** Every option's value when it is not given (hashicorp/yamux's DefaultConfig, relay's numbers). */
export const SESSION_DEFAULTS = {
  streamWindow: 1024 * 1024,
  maxQueuedBytes: 128 * 1024,
  maxFrameBytes: 256 * 1024,
  maxBatchBytes: 256 * 1024,
  keepAliveIntervalMs: 15_000,
  keepAliveTimeoutMs: 30_000,
  maxStreams: 4096,
  maxControlFrames: 4096,
  priorityLevels: 4,
} as const;

export type ResolvedSessionOptions = { readonly client: boolean } & { readonly [K in keyof typeof SESSION_DEFAULTS]: number };

/**
 * Options with their defaults, checked (hashicorp/yamux's VerifyConfig): a window under the spec's initial
 * 256 KiB, a keepalive without a timeout, or a count that is not a positive integer is INVALID_ARGUMENT.
 * A batch smaller than one full frame is raised to one.
 */
export function verifySessionOptions(o: SessionOptions): ResolvedSessionOptions {
  const r = { ...SESSION_DEFAULTS, ...Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) } as ResolvedSessionOptions;
  const bad = (why: string): never => {
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, `yamux session options: ${why}`);
  };
  if (r.streamWindow < INITIAL_WINDOW) bad(`streamWindow must be at least ${INITIAL_WINDOW} (the spec's initial window), got ${r.streamWindow}`);
  for (const k of ['maxQueuedBytes', 'maxFrameBytes', 'maxBatchBytes', 'maxStreams', 'maxControlFrames', 'priorityLevels'] as const) {
    if (!Number.isInteger(r[k]) || r[k] < 1) bad(`${k} must be a positive integer, got ${r[k]}`);
  }
  if (r.keepAliveIntervalMs < 0) bad(`keepAliveIntervalMs must be >= 0 (0: off), got ${r.keepAliveIntervalMs}`);
  if (r.keepAliveIntervalMs > 0 && !(r.keepAliveTimeoutMs > 0)) bad('a keepalive needs keepAliveTimeoutMs > 0');
  if (r.priorityLevels > 16) bad(`priorityLevels must be at most 16, got ${r.priorityLevels}`);
  return { ...r, maxBatchBytes: Math.max(r.maxFrameBytes + HEADER_BYTES, r.maxBatchBytes) };
}

export class Session extends EventEmitter implements StreamOwner {
  readonly streamWindow: number;
  private readonly opts: ResolvedSessionOptions;
  private readonly streams = new Map<number, YamuxStream>();
  private nextId: number;
  private readonly writer: FrameWriter;
  private readonly decoder: FrameDecoder;
  private localGoAway = false;
  private remoteGoAway = false;
  private dead: Error | null = null;
  private readonly pings = new Pings(
    (id) => this.sendControl(FrameType.PING, Flag.SYN, 0, id),
    (ms) => this.writer.sawRtt(ms),
  );
  private keepAliveTimer: NodeJS.Timeout | null = null;
  /** Counters for tests and /status. */
  readonly stats = { streamsOpened: 0, streamsAccepted: 0, framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };

  constructor(
    private readonly transport: Duplex,
    opts: SessionOptions,
  ) {
    super();
    this.opts = verifySessionOptions(opts);
    this.streamWindow = this.opts.streamWindow;
    this.writer = new FrameWriter(transport, this.opts, this.stats, { onFinished: (s) => this.forget(s), onFlushed: () => this.emit('flushed') });
    this.nextId = opts.client ? 1 : 2;
    this.decoder = new FrameDecoder((h) => {
      const s = this.streams.get(h.streamId);
      // A SYN-carrying DATA frame may use the initial window; a known stream its current one.
      return s ? stateOf(s).recvWindow : INITIAL_WINDOW;
    });
    transport.on('data', (chunk: Buffer) => this.onData(chunk));
    transport.on('error', (err: Error) => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, `tunnel transport failed: ${err.message}`)));
    transport.on('close', () => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'tunnel transport closed')));
    transport.on('end', () => this.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'tunnel transport ended')));
    const interval = this.opts.keepAliveIntervalMs;
    if (interval > 0) {
      this.keepAliveTimer = setInterval(() => {
        this.ping(this.opts.keepAliveTimeoutMs, 2 * this.opts.keepAliveTimeoutMs).catch((err: Error) => this.destroy(err));
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

  /**
   * Open an outbound stream at a priority level (0 = most urgent; by default the middle one). Its SYN goes
   * out at once (so the peer can accept before any data).
   */
  open(priority: number = Math.floor(this.opts.priorityLevels / 2)): YamuxStream {
    if (this.dead) throw new RelayError(ErrorCode.SESSION_CLOSED, `the tunnel is closed: ${this.dead.message}`);
    if (this.remoteGoAway || this.localGoAway) throw new RelayError(ErrorCode.SESSION_CLOSED, 'the tunnel is going away: no new streams');
    if (this.nextId > 0xffffffff) throw new RelayError(ErrorCode.SESSION_CLOSED, 'stream ids exhausted');
    const id = this.nextId;
    this.nextId += 2;
    const s = new YamuxStream(this, id, 0, priority);
    this.streams.set(id, s);
    this.stats.streamsOpened++;
    this.sendControl(FrameType.WINDOW_UPDATE, Flag.SYN, id, this.streamWindow - INITIAL_WINDOW);
    stateOf(s).recvWindow = this.streamWindow;
    return s;
  }

  /**
   * Round-trip time of one ping. It fails when the peer sends nothing at all for `quietMs` after it (a dead link, a
   * stopped process), or gives no answer in `maxMs` while its other bytes still arrive (pings.ts: on a slow link
   * the answer waits behind them).
   */
  ping(quietMs = 10_000, maxMs = quietMs): Promise<number> {
    if (this.dead) return Promise.reject(this.dead);
    return this.pings.ping(quietMs, maxMs);
  }

  /** The link as measured so far: the least ping round trip and the rate bulk streams were read at (null until seen). */
  link(): LinkMeasure {
    return this.writer.link();
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
    if (this.writer.idle) finish();
    else this.once('flushed', finish);
  }

  /** Force: every stream fails with `err`, the transport is destroyed. Idempotent. */
  destroy(err: Error = new RelayError(ErrorCode.SESSION_CLOSED, 'the tunnel was closed')): void {
    if (this.dead) return;
    this.dead = err;
    if (this.keepAliveTimer) clearInterval(this.keepAliveTimer);
    this.pings.clear(err);
    for (const s of [...this.streams.values()]) {
      stateOf(s).reset = true;
      s.destroy(new RelayError(ErrorCode.SESSION_CLOSED, `tunnel lost: ${err.message}`));
    }
    this.streams.clear();
    this.writer.stop();
    this.transport.destroy();
    this.emit('close', err);
  }

  // ---- receiving ----

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.stats.bytesIn += chunk.byteLength;
    this.pings.heard();
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
    if (this.dead) return; // a frame that killed the session (a protocol error, an overload) is the last one acted on
    this.stats.framesIn++;
    switch (h.type) {
      case FrameType.PING:
        if (h.flags & Flag.SYN) this.sendControl(FrameType.PING, Flag.ACK, 0, h.length);
        else if (h.flags & Flag.ACK) this.pings.answered(h.length);
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
      if (this.localGoAway || this.streams.size >= this.opts.maxStreams || this.listenerCount('stream') === 0) {
        this.sendControl(FrameType.WINDOW_UPDATE, Flag.RST, h.streamId, 0);
        return;
      }
      s = new YamuxStream(this, h.streamId, Flag.ACK, Math.floor(this.opts.priorityLevels / 2));
      this.streams.set(h.streamId, s);
      this.stats.streamsAccepted++;
      // ACK now, with our larger window: the opener may be waiting to learn the stream exists.
      this.sendControl(FrameType.WINDOW_UPDATE, Flag.ACK, h.streamId, this.streamWindow - INITIAL_WINDOW);
      stateOf(s).openFlags = 0;
      stateOf(s).recvWindow = this.streamWindow;
      this.emit('stream', s);
    }
    if (!s) return; // a late frame for a stream we already forgot: nothing to do
    const st = stateOf(s);
    if (h.flags & Flag.RST) {
      st.reset = true;
      this.forget(s);
      s.destroy(new RelayError(ErrorCode.STREAM_RESET, `stream ${s.id} was reset by the peer`));
      return;
    }
    if (h.type === FrameType.WINDOW_UPDATE && h.length > 0) {
      const was = st.sendWindow;
      st.sendWindow += h.length;
      // A grant after reads (not the SYN/ACK's larger window): a paced stream's bytes have left the link.
      if (st.paced && !(h.flags & (Flag.SYN | Flag.ACK))) this.writer.returned(s, h.length);
      if (was === 0 && (st.pending.length > 0 || st.finPending)) this.schedule(s);
    }
    if (h.type === FrameType.DATA && payload) {
      if (payload.byteLength > st.recvWindow) throw new ProtocolError(`stream ${s.id} overran its window`);
      st.recvWindow -= payload.byteLength;
      st.bytesRead += payload.byteLength;
      if (!st.remoteClosed) s.push(payload);
      this.maybeGrant(s);
    }
    if (h.flags & Flag.FIN && !st.remoteClosed) {
      st.remoteClosed = true;
      s.push(null);
      if (st.finished) this.forget(s);
    }
  }

  /** Return window to the peer once the reader has consumed GRANT_STEP or half of it (hashicorp's rule; pacer.ts). */
  maybeGrant(s: YamuxStream): void {
    const st = stateOf(s);
    if (st.reset || st.remoteClosed || this.dead) return;
    const delta = this.streamWindow - st.recvWindow - s.readableLength;
    if (delta >= Math.min(GRANT_STEP, this.streamWindow / 2)) {
      st.recvWindow += delta;
      this.sendControl(FrameType.WINDOW_UPDATE, 0, s.id, delta);
    }
  }

  // ---- sending (writer.ts) ----

  private sendControl(type: number, flags: number, id: number, length: number): void {
    if (this.dead) return;
    if (!this.writer.sendControl(type, flags, id, length)) {
      this.destroy(new RelayError(ErrorCode.TUNNEL_OVERLOAD, `the tunnel peer does not read: ${this.writer.queuedControlFrames} control frames queued`));
    }
  }

  schedule(s: YamuxStream): void {
    if (!this.dead) this.writer.schedule(s);
  }

  // ---- stream bookkeeping ----

  private forget(s: YamuxStream): void {
    this.streams.delete(s.id);
    this.writer.drop(s);
  }

  onStreamDestroyed(s: YamuxStream, _err: Error | null): void {
    const st = stateOf(s);
    if (!st.finished && !this.dead) {
      // Destroyed locally before a clean close both ways: tell the peer.
      st.reset = true;
      this.sendControl(FrameType.WINDOW_UPDATE, Flag.RST, s.id, 0);
    }
    st.reset = st.reset || !st.finished;
    for (const w of st.pending.splice(0)) queueMicrotask(() => w.cb(new RelayError(ErrorCode.STREAM_RESET, `stream ${s.id} was destroyed`)));
    this.forget(s);
  }
}
