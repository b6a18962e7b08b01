import { connect } from 'node:net';
import { Duplex } from 'node:stream';
import type { SpareSockets } from '../../llama/spare-sockets.js';
import type { Lease } from '../../scheduler/placements/placement.js';

/**
 * The hub's HTTP/1.1 client for llama-server: one POST per connection (`Connection: close`), its response
 * head parsed here and its body handed on twice — as the bytes that came, chunked framing included (so an SSE
 * stream can go to the client socket as it is, one write per read), and as the payload inside that framing
 * (for token counts, error bodies and translated dialects). Node's own client parses each chunk into a stream
 * event, and the server re-frames it per write: measured in front of one llama-server, that is ~40 % of a
 * relay's CPU per streamed token (docs/benchmarks.md). Only what llama-server sends is read: a status line,
 * headers, then a body that is chunked, has a length, or ends with the connection.
 */

export interface UpstreamHead {
  readonly status: number;
  /** Header names lower-cased; a repeated header keeps its last value. */
  readonly headers: Readonly<Record<string, string>>;
  readonly chunked: boolean;
}

/** The longest response head read, and the longest chunk-size or trailer line. */
const MAX_HEAD = 64 * 1024;
const MAX_LINE = 1024;
const EMPTY = Buffer.alloc(0);

/** Pure: the response head from the bytes received so far, and the body bytes after it; null while incomplete. */
export function parseHead(buf: Buffer): { head: UpstreamHead; rest: Buffer } | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) {
    if (buf.byteLength > MAX_HEAD) throw new Error('response head too long');
    return null;
  }
  const [statusLine = '', ...lines] = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  if (!m) throw new Error(`not an HTTP/1.1 response: ${JSON.stringify(statusLine.slice(0, 40))}`);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const chunked = /\bchunked\b/i.test(headers['transfer-encoding'] ?? '');
  return { head: { status: Number(m[1]), headers, chunked }, rest: buf.subarray(end + 4) };
}

/** What one read of a chunked body holds: the bytes to pass on as they are, the payload, whether it ended. */
export interface ChunkedRead {
  /** Whole chunks with their framing (those this read completed), never the last chunk (`0\r\n\r\n`) or a trailer. */
  readonly forward: Buffer[];
  /** The payload this read brought, as it came. */
  readonly payload: Buffer[];
  /** The payload of the chunks in `forward`: what a client given `forward` has (llama-server writes whole events per chunk). */
  readonly whole: Buffer[];
  readonly done: boolean;
}

/**
 * A chunked body read as it arrives, cut anywhere. `forward` only ever ends where a chunk ends: the bytes of a
 * chunk cut by a read are held until it is whole. So the client's framing is valid whatever happens next — an
 * upstream that dies mid-chunk leaves the client whole chunks (each one SSE event, as llama-server writes them),
 * and its error event follows cleanly — and the last chunk is never half passed on (the client's server
 * writes the client's own, see proxy.ts).
 */
export class ChunkedBody {
  private state: 'size' | 'data' | 'crlf' | 'trailer' | 'done' = 'size';
  /** Bytes of the chunk under way, from earlier reads (not copied: a read's buffer is never reused), and its payload. */
  private pending: Buffer[] = [];
  private pendingPayload: Buffer[] = [];
  /** The text of a size or trailer line cut by a read. */
  private line = '';
  private left = 0;

  get done(): boolean {
    return this.state === 'done';
  }

  read(buf: Buffer): ChunkedRead {
    const forward: Buffer[] = [];
    const payload: Buffer[] = [];
    const whole: Buffer[] = [];
    let seg = 0; // the first byte of buf not yet forwarded or pending
    let i = 0;
    const chunkEnded = (): void => {
      forward.push(...this.pending);
      if (i > seg) forward.push(buf.subarray(seg, i));
      whole.push(...this.pendingPayload);
      this.pending = [];
      this.pendingPayload = [];
      seg = i;
    };
    while (i < buf.byteLength && this.state !== 'done') {
      if (this.state === 'data') {
        const n = Math.min(this.left, buf.byteLength - i);
        payload.push(buf.subarray(i, i + n));
        this.pendingPayload.push(buf.subarray(i, i + n));
        this.left -= n;
        i += n;
        if (this.left === 0) this.state = 'crlf';
        continue;
      }
      if (this.state === 'crlf') {
        // The CR LF after a chunk's data (a read may cut between them).
        if (buf[i] === 0x0a) this.state = 'size';
        else if (buf[i] !== 0x0d) throw new Error('chunk data not followed by CRLF');
        i++;
        if (this.state === 'size') chunkEnded();
        continue;
      }
      const nl = buf.indexOf(0x0a, i);
      const text = buf.subarray(i, nl < 0 ? buf.byteLength : nl).toString('latin1');
      if (this.line.length + text.length > MAX_LINE) throw new Error('chunk line too long');
      if (nl < 0) {
        this.line += text;
        i = buf.byteLength;
        break;
      }
      const line = (this.line + text).replace(/\r$/, '');
      this.line = '';
      i = nl + 1;
      if (this.state === 'trailer') {
        if (line === '') this.state = 'done';
        continue;
      }
      const hex = line.split(';')[0]!.trim();
      if (!/^[0-9a-fA-F]{1,8}$/.test(hex)) throw new Error(`bad chunk size ${JSON.stringify(line.slice(0, 20))}`);
      const size = parseInt(hex, 16);
      if (size === 0) {
        // The last chunk (and any trailer): none of it goes on.
        this.pending = [];
        this.pendingPayload = [];
        seg = buf.byteLength;
        this.state = 'trailer';
      } else {
        this.left = size;
        this.state = 'data';
      }
    }
    if (this.state !== 'trailer' && this.state !== 'done' && i > seg) this.pending.push(buf.subarray(seg, i));
    return { forward, payload, whole, done: this.state === 'done' };
  }
}

export interface UpstreamHandlers {
  head(head: UpstreamHead): void;
  /** Body bytes: as received (framing included, see ChunkedRead), their payload, and the payload of the whole chunks. */
  body(forward: Buffer[], payload: Buffer[], whole: Buffer[]): void;
  /** The whole body arrived. */
  end(): void;
  /** The connection failed or closed before the body was whole (the reason: an errno code or a phrase). */
  broken(why: string): void;
}

/**
 * POST `body` to `path` on `socket` (a connection to llama-server, or an http stream through a node's tunnel)
 * and report the answer to `h`. Each handler runs at most once per event, and after `end` or `broken` nothing
 * more is reported. The socket is destroyed when the answer is whole or broken.
 */
export function postUpstream(socket: Duplex, req: { path: string; host: string; accept: string; body: Buffer }, h: UpstreamHandlers): void {
  let head: UpstreamHead | null = null;
  let pending: Buffer = EMPTY;
  let chunked: ChunkedBody | null = null;
  let length: number | null = null;
  let over = false;
  const finish = (why: string | null): void => {
    if (over) return;
    over = true;
    socket.destroy();
    if (why === null) h.end();
    else h.broken(why);
  };
  const onBody = (buf: Buffer): void => {
    if (buf.byteLength === 0) return;
    if (chunked) {
      const r = chunked.read(buf);
      if (r.forward.length || r.payload.length) h.body(r.forward, r.payload, r.whole);
      if (r.done) finish(null);
      return;
    }
    const part = length === null ? buf : buf.subarray(0, length);
    if (length !== null) length -= part.byteLength;
    h.body([part], [part], [part]);
    if (length === 0) finish(null);
  };
  socket.on('data', (buf: Buffer) => {
    if (over) return;
    try {
      if (head) return onBody(buf);
      pending = pending.byteLength ? Buffer.concat([pending, buf]) : buf;
      const parsed = parseHead(pending);
      if (!parsed) return;
      pending = EMPTY;
      head = parsed.head;
      chunked = head.chunked ? new ChunkedBody() : null;
      const cl = head.headers['content-length'];
      length = chunked || cl === undefined ? null : Number(cl);
      h.head(head);
      if (over) return;
      if (length === 0) return finish(null);
      onBody(parsed.rest);
    } catch (err) {
      finish((err as Error).message);
    }
  });
  socket.on('end', () => finish(head && !chunked && length === null ? null : 'connection closed'));
  socket.on('close', () => finish('connection closed'));
  socket.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message));
  const lines = [`POST ${req.path} HTTP/1.1`, `Host: ${req.host}`, 'Content-Type: application/json', `Content-Length: ${req.body.byteLength}`, `Accept: ${req.accept}`, 'Connection: close', '', ''];
  socket.cork();
  socket.write(lines.join('\r\n'));
  socket.write(req.body);
  socket.uncork();
}

/**
 * The connection a request goes out on: a fresh http stream through the node's tunnel, a spare socket, or a new
 * one. A tunnel that is going away refuses the stream at once (it throws): that is the placement failing before
 * the first byte, so it is handed over as a connection that errors, and the request goes elsewhere.
 */
export function openUpstream(lease: Lease, spares: SpareSockets | undefined, host: string, port: number): Duplex {
  try {
    return lease.connect ? lease.connect() : spares ? spares.take(host, port) : connect({ host, port, noDelay: true });
  } catch (err) {
    const failed = new Duplex({ read: () => undefined, write: (_c, _e, done) => done() }); // takes the request, answers nothing
    process.nextTick(() => failed.destroy(err instanceof Error ? err : new Error(String(err))));
    return failed;
  }
}
