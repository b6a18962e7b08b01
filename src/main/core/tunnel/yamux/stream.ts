import { Duplex } from 'node:stream';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { INITIAL_WINDOW } from './frame.js';

export interface PendingWrite {
  chunk: Buffer;
  offset: number;
  cb: (err?: Error | null) => void;
}

/** A stream's flow-control and lifecycle state. Only its session reads and changes it (stateOf). */
export class StreamState {
  sendWindow = INITIAL_WINDOW;
  recvWindow = INITIAL_WINDOW;
  readonly pending: PendingWrite[] = [];
  finPending: ((err?: Error | null) => void) | null = null;
  localClosed = false;
  remoteClosed = false;
  reset = false;
  bytesRead = 0;
  bytesWritten = 0;
  /** A bulk stream: what it has in flight is paced (pacer.ts). */
  paced = false;
  /** Bytes a paced stream sent that the peer has not yet returned as window. */
  unacked = 0;

  constructor(
    /** Set when the SYN (opener) or ACK (acceptor) still has to ride on this stream's first frame. */
    public openFlags: number,
    /** 0 = most urgent; the session's writer serves lower levels first. */
    public priority: number,
  ) {}

  /** True once nothing more can flow either way: the session forgets the stream then. */
  get finished(): boolean {
    return this.reset || (this.localClosed && this.remoteClosed);
  }
}

/** What a stream asks of the session that carries it. */
export interface StreamOwner {
  readonly streamWindow: number;
  schedule(s: YamuxStream): void;
  maybeGrant(s: YamuxStream): void;
  onStreamDestroyed(s: YamuxStream, err: Error | null): void;
}

/** The key of a stream's state: a symbol this module and the session share, so it is no public field. */
const STATE = Symbol('yamux stream state');

/** The session's handle on a stream's state (a property read: it is on the per-frame path). */
export function stateOf(s: YamuxStream): StreamState {
  return s[STATE];
}

/**
 * One yamux stream: a Node Duplex whose writes become DATA frames (within the peer's window) and whose reads
 * grant window back as they are consumed. Its state lives in StreamState, changed by its session only.
 */
export class YamuxStream extends Duplex {
  /** Opaque tag for the layer above (stream kind). */
  kind: string | null = null;
  readonly [STATE]: StreamState;

  constructor(
    private readonly owner: StreamOwner,
    readonly id: number,
    openFlags: number,
    priority: number,
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: owner.streamWindow, writableHighWaterMark: 64 * 1024 });
    this[STATE] = new StreamState(openFlags, priority);
  }

  /** 0 = most urgent. May be changed once the stream's purpose is known (the acceptor learns it from a header). */
  get priority(): number {
    return stateOf(this).priority;
  }

  set priority(p: number) {
    stateOf(this).priority = p;
  }

  /** A bulk stream (a weight push): its bytes in flight are kept to a short queue on a slow link (pacer.ts). */
  get paced(): boolean {
    return stateOf(this).paced;
  }

  set paced(p: boolean) {
    stateOf(this).paced = p;
  }

  get bytesRead(): number {
    return stateOf(this).bytesRead;
  }

  get bytesWritten(): number {
    return stateOf(this).bytesWritten;
  }

  /** True once nothing more can flow either way. */
  get finished(): boolean {
    return stateOf(this).finished;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const st = stateOf(this);
    if (st.reset) return cb(new RelayError(ErrorCode.STREAM_RESET, `stream ${this.id} was reset`));
    st.pending.push({ chunk, offset: 0, cb });
    this.owner.schedule(this);
  }

  override _final(cb: (err?: Error | null) => void): void {
    const st = stateOf(this);
    if (st.reset) return cb();
    st.finPending = cb;
    this.owner.schedule(this);
  }

  override _read(): void {
    this.owner.maybeGrant(this);
  }

  /**
   * Every consumption path (pipe, 'data' in flowing mode, async iteration) goes through read(); _read alone is
   * not enough, Node calls it once and then waits for a push that cannot come before we grant window.
   */
  override read(size?: number): unknown {
    const r: unknown = super.read(size);
    this.owner.maybeGrant(this);
    return r;
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.owner.onStreamDestroyed(this, err);
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
}
