import { EventEmitter } from 'node:events';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import {
  MAX_BAD_LINE_ANSWERS,
  MAX_BAD_LINES_PER_MINUTE,
  MAX_CONTROL_LINE_BYTES,
  MAX_CONTROL_QUEUE_BYTES,
  MAX_HEADER_LINE_BYTES,
  type Reply,
  type StreamHeader,
  type StreamKind,
} from '../../../shared/protocol.js';
import { parseStreamHeader, type Parsed } from '../../../shared/protocol-validate.js';
import type { Session, YamuxStream } from './yamux/session.js';

/**
 * What rides on a yamux stream: a header line naming its kind, then the kind's bytes. The control kind
 * carries newline-delimited JSON messages with request/reply correlation.
 */
/**
 * The yamux writer's priority level of each stream kind (0 first): control messages, then ggml-rpc (a token
 * waits on it), then HTTP (chat), then weight pushes (bulk). Sessions carrying relay's tunnel have these levels.
 */
/**
 * The tunnel's keep-alive, both ends: a ping every 5 s, dead when one goes unanswered for 10 s — a node that
 * sleeps or loses its Wi-Fi while idle leaves the pool within 15 s. (Something waiting on a node pings it at once:
 * pool/conn.ts's probe.)
 */
export const TUNNEL_KEEPALIVE = { keepAliveIntervalMs: 5000, keepAliveTimeoutMs: 10_000 } as const;

export const KIND_PRIORITY: Readonly<Record<StreamKind, number>> = { control: 0, rpc: 1, http: 2, file: 3, slot: 3 };
export const TUNNEL_PRIORITY_LEVELS = 4;
/** Bulk kinds: their bytes in flight are paced to a short queue (yamux/pacer.ts), so a push never buries a ping. */
const PACED: ReadonlySet<StreamKind> = new Set(['file', 'slot']);

/** Open a stream of `header.kind` and write its header line. */
export function openStream(session: Session, header: StreamHeader): YamuxStream {
  const st = session.open(KIND_PRIORITY[header.kind]);
  st.kind = header.kind;
  st.paced = PACED.has(header.kind);
  st.write(`${JSON.stringify(header)}\n`);
  return st;
}

/**
 * Read an accepted stream's header line (bounded), set its priority, and leave the rest unread: the stream
 * is left paused, so its consumer must pipe it, iterate it, or resume() it after adding its listener.
 */
export function acceptStream(st: YamuxStream, timeoutMs = 10_000): Promise<StreamHeader> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => fail(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'no stream header within the time limit')), timeoutMs);
    const cleanup = (): void => {
      clearTimeout(timer);
      st.off('data', onData);
      st.off('error', fail);
      st.off('end', onEnd);
    };
    const fail = (err: Error): void => {
      cleanup();
      reject(err);
    };
    const onEnd = (): void => fail(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'stream ended before its header'));
    const onData = (chunk: Buffer): void => {
      buf = buf.byteLength === 0 ? chunk : Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(0x0a);
      if (nl < 0) {
        if (buf.byteLength > MAX_HEADER_LINE_BYTES) fail(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'stream header too long'));
        return;
      }
      cleanup();
      st.pause();
      const rest = buf.subarray(nl + 1);
      if (rest.byteLength > 0) st.unshift(rest);
      const header = parseStreamHeader(buf.subarray(0, nl).toString('utf8'));
      if (!header) return reject(new RelayError(ErrorCode.TUNNEL_PROTOCOL, `bad stream header: ${buf.subarray(0, Math.min(nl, 120)).toString('utf8')}`));
      st.kind = header.kind;
      st.priority = KIND_PRIORITY[header.kind];
      st.paced = PACED.has(header.kind);
      resolve(header);
    };
    st.on('data', onData);
    st.once('error', fail);
    st.once('end', onEnd);
  });
}

/**
 * Newline-delimited JSON over a stream. Incoming lines go through `parse` (the protocol's validators); a line
 * that fails is answered with an error message (the first MAX_BAD_LINE_ANSWERS of them), never acted on, and
 * never fatal — unless a peer sends more than MAX_BAD_LINES_PER_MINUTE of them, which ends the stream. What this
 * side sends is bounded too: a peer that lets over MAX_CONTROL_QUEUE_BYTES wait unread is cut off. Either way the
 * stream is destroyed with the reason, its 'close' says it, and nothing after the fatal line is dispatched.
 */
export class ControlChannel<In extends { type: string }, Out extends object> extends EventEmitter {
  private buf = '';
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private closedErr: Error | null = null;
  private bad = { since: 0, count: 0, answered: 0 };

  constructor(
    readonly stream: YamuxStream,
    private readonly parse: (line: string) => Parsed<In>,
    private readonly limits: { readonly maxQueuedBytes?: number; readonly maxBadLinesPerMinute?: number } = {},
  ) {
    super();
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => this.onData(chunk));
    stream.resume(); // acceptStream leaves streams paused after their header
    const closed = (err?: Error): void => this.onClosed(err ?? new RelayError(ErrorCode.SESSION_CLOSED, 'control stream closed'));
    stream.on('error', closed);
    stream.on('close', () => closed());
    stream.on('end', () => closed());
  }

  /** The reason the channel ended, once it has. */
  get closed(): Error | null {
    return this.closedErr;
  }

  /** End the channel now with `err` (the stream is destroyed; waiting requests reject with it). */
  fail(err: RelayError): void {
    if (this.closedErr) return;
    this.onClosed(err);
    this.stream.destroy(err);
  }

  send(msg: Out): void {
    if (this.closedErr || this.stream.destroyed || this.stream.writableEnded) return;
    this.stream.write(`${JSON.stringify(msg)}\n`);
    const max = this.limits.maxQueuedBytes ?? MAX_CONTROL_QUEUE_BYTES;
    if (this.stream.writableLength > max) {
      this.fail(new RelayError(ErrorCode.TUNNEL_OVERLOAD, `the peer does not read its control stream: ${this.stream.writableLength} bytes of messages wait (limit ${max})`));
    }
  }

  /** Send a command carrying a fresh `id` and wait for the reply with that id. */
  request(msg: Omit<Out, 'id'> & { type: string }, timeoutMs = 60_000): Promise<Reply> {
    if (this.closedErr) return Promise.reject(this.closedErr);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new RelayError(ErrorCode.UPSTREAM_ERROR, `no reply to "${msg.type}" within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(id, { resolve, reject, timer });
      this.send({ ...msg, id } as unknown as Out);
    });
  }

  private onData(chunk: string): void {
    if (this.closedErr) return;
    this.buf += chunk;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      if (this.closedErr) return; // a fatal line before this one: nothing after it is dispatched
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      if (line.trim() === '') continue;
      const p = this.parse(line);
      if (!p.ok) {
        this.onBadLine(p);
        continue;
      }
      const msg = p.msg;
      if (msg.type === 'reply') {
        const r = msg as unknown as Reply;
        const w = this.waiting.get(r.id);
        if (w) {
          clearTimeout(w.timer);
          this.waiting.delete(r.id);
          w.resolve(r);
        }
        continue;
      }
      this.emit('message', msg);
    }
    if (this.buf.length > MAX_CONTROL_LINE_BYTES) {
      this.send({ type: 'error', code: 'bad_message', message: 'control line too long' } as unknown as Out);
      this.fail(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'control line too long'));
    }
  }

  private onBadLine(p: Extract<Parsed<In>, { ok: false }>): void {
    const now = Date.now();
    if (now - this.bad.since > 60_000) this.bad = { since: now, count: 0, answered: 0 };
    this.bad.count++;
    const max = this.limits.maxBadLinesPerMinute ?? MAX_BAD_LINES_PER_MINUTE;
    if (this.bad.count > max) {
      this.fail(new RelayError(ErrorCode.TUNNEL_PROTOCOL, `the peer sent over ${max} malformed control messages in a minute`));
      return;
    }
    if (this.bad.answered++ < MAX_BAD_LINE_ANSWERS) this.send({ type: 'error', code: p.code, message: p.message } as unknown as Out);
    this.emit('bad', p);
  }

  private onClosed(err: Error): void {
    if (this.closedErr) return;
    this.closedErr = err;
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(err);
    }
    this.waiting.clear();
    this.emit('close', err);
  }

  close(): void {
    this.stream.end();
  }
}

export function replyOk(id: number, data?: Record<string, unknown>): Reply {
  return data ? { type: 'reply', id, ok: true, data } : { type: 'reply', id, ok: true };
}

export function replyErr(id: number, code: string, message: string): Reply {
  return { type: 'reply', id, ok: false, code, message };
}
