/**
 * yamux frames (hashicorp/yamux spec.md): a 12-byte big-endian header
 *   version u8 (0) | type u8 | flags u16 | stream id u32 | length u32
 * DATA carries `length` payload bytes; for WINDOW_UPDATE `length` is the window delta, for PING an opaque
 * value, for GO_AWAY the error code, and no payload follows.
 */
export const YAMUX_VERSION = 0;
export const HEADER_BYTES = 12;
/** The window every stream starts with, by the spec. */
export const INITIAL_WINDOW = 256 * 1024;

export const FrameType = { DATA: 0, WINDOW_UPDATE: 1, PING: 2, GO_AWAY: 3 } as const;
export const Flag = { SYN: 1, ACK: 2, FIN: 4, RST: 8 } as const;
export const GoAwayCode = { NORMAL: 0, PROTOCOL_ERROR: 1, INTERNAL_ERROR: 2 } as const;

export interface FrameHeader {
  readonly version: number;
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly length: number;
}

export function encodeHeader(type: number, flags: number, streamId: number, length: number): Buffer {
  const b = Buffer.allocUnsafe(HEADER_BYTES);
  b.writeUInt8(YAMUX_VERSION, 0);
  b.writeUInt8(type, 1);
  b.writeUInt16BE(flags, 2);
  b.writeUInt32BE(streamId >>> 0, 4);
  b.writeUInt32BE(length >>> 0, 8);
  return b;
}

export function decodeHeader(b: Buffer, at = 0): FrameHeader {
  return {
    version: b.readUInt8(at),
    type: b.readUInt8(at + 1),
    flags: b.readUInt16BE(at + 2),
    streamId: b.readUInt32BE(at + 4),
    length: b.readUInt32BE(at + 8),
  };
}

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'YamuxProtocolError';
  }
}

/**
 * Turns a byte stream cut anywhere (TCP segments, WebSocket messages) back into frames. A header or payload
 * split across chunks is reassembled; a payload is concatenated once, when it is complete.
 */
export class FrameDecoder {
  private parts: Buffer[] = [];
  private have = 0;
  private header: FrameHeader | null = null;

  /** `maxPayload` bounds what a peer can make us buffer for one frame. */
  constructor(private readonly maxPayload: (h: FrameHeader) => number) {}

  /** Feed a chunk; calls `onFrame` for every complete frame in order. Throws ProtocolError on garbage. */
  push(chunk: Buffer, onFrame: (h: FrameHeader, payload: Buffer | null) => void): void {
    if (chunk.byteLength > 0) {
      this.parts.push(chunk);
      this.have += chunk.byteLength;
    }
    for (;;) {
      if (!this.header) {
        if (this.have < HEADER_BYTES) return;
        const h = decodeHeader(this.take(HEADER_BYTES));
        if (h.version !== YAMUX_VERSION) throw new ProtocolError(`invalid protocol version ${h.version}`);
        if (h.type > FrameType.GO_AWAY) throw new ProtocolError(`invalid frame type ${h.type}`);
        if (h.type === FrameType.DATA && h.length > this.maxPayload(h)) {
          throw new ProtocolError(`DATA frame of ${h.length} bytes on stream ${h.streamId} exceeds the window`);
        }
        this.header = h;
      }
      const h = this.header;
      if (h.type !== FrameType.DATA || h.length === 0) {
        this.header = null;
        onFrame(h, null);
        continue;
      }
      if (this.have < h.length) return;
      const payload = this.take(h.length);
      this.header = null;
      onFrame(h, payload);
    }
  }

  private take(n: number): Buffer {
    const first = this.parts[0]!;
    let out: Buffer;
    if (first.byteLength >= n) {
      out = first.subarray(0, n);
      if (first.byteLength === n) this.parts.shift();
      else this.parts[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let off = 0;
      while (off < n) {
        const p = this.parts[0]!;
        const k = Math.min(p.byteLength, n - off);
        p.copy(out, off, 0, k);
        off += k;
        if (k === p.byteLength) this.parts.shift();
        else this.parts[0] = p.subarray(k);
      }
    }
    this.have -= n;
    return out;
  }
}
