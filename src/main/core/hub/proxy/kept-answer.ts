import { ChunkedBody } from './upstream-http.js';
import { usageFromTail, type Usage } from './llama-answer.js';

const TAIL_BYTES = 8192;

/** How much of a response's start is kept for its token counts (a Messages stream gives its input tokens first). */
const HEAD_BYTES = 4096;

/**
 * What the proxy keeps of one answer as it passes: its start and its last bytes, by reference and decoded once at
 * the end (the token counts, an ending error) — nothing per token but a push — and, for a request that may move,
 * every byte the client was given (copied: a transport's read is not pinned), which a continuation needs.
 */
export class KeptAnswer {
  private readonly tail: Buffer[] = [];
  private tailBytes = 0;
  private readonly head: Buffer[];
  private headBytes: number;
  private readonly sent: Buffer[];

  /** `before`: a continuation's first part (what its client was given, and that stream's start). */
  constructor(before?: { readonly sent: Buffer; readonly head: Buffer }) {
    this.head = before ? [before.head] : [];
    this.headBytes = before?.head.byteLength ?? 0;
    this.sent = before ? [before.sent] : [];
  }

  /** The payload's chunks, as the client's answer has them. */
  keep(payload: readonly Buffer[]): void {
    for (const chunk of payload) {
      if (this.headBytes < HEAD_BYTES) {
        this.head.push(chunk.subarray(0, HEAD_BYTES - this.headBytes));
        this.headBytes += this.head.at(-1)!.byteLength;
      }
      this.tail.push(chunk);
      this.tailBytes += chunk.byteLength;
      while (this.tailBytes - this.tail[0]!.byteLength >= TAIL_BYTES) this.tailBytes -= this.tail.shift()!.byteLength;
    }
  }

  /** What the client was given (whole chunks: the raw passthrough's framed ones, else the payload's). */
  keepSent(given: readonly Buffer[]): void {
    for (const b of given) this.sent.push(Buffer.from(b));
  }

  tailText(): string {
    return Buffer.concat(this.tail).toString('utf8');
  }

  usage(): Usage | null {
    return usageFromTail(this.tailText(), Buffer.concat(this.head).toString('utf8'));
  }

  /** A move's record: llama-server's bytes the client had (unframed when they went raw) and the stream's start. */
  forMove(framed: boolean): { sent: Buffer; head: Buffer } {
    const all = Buffer.concat(this.sent);
    return { sent: framed ? Buffer.concat(new ChunkedBody().read(all).payload) : all, head: Buffer.concat(this.head) };
  }
}
