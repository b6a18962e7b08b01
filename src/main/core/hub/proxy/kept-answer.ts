import { usageFromTail, type Usage } from './llama-answer.js';

const TAIL_BYTES = 8192;

/** How much of a response's start is kept for its token counts (a Messages stream gives its input tokens first). */
const HEAD_BYTES = 4096;

/**
 * What the proxy keeps of one answer as it passes: its start and its last bytes, by reference and decoded once at
 * the end (the token counts, an ending error) — nothing per token but a push. (What a continuation needs of the
 * answer is read as it goes: sent.ts.)
 */
export class KeptAnswer {
  private readonly tail: Buffer[] = [];
  private tailBytes = 0;
  private readonly head: Buffer[];
  private headBytes: number;

  /** `head`: a continuation's first part's start. */
  constructor(head?: Buffer) {
    this.head = head ? [head] : [];
    this.headBytes = head?.byteLength ?? 0;
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

  tailText(): string {
    return Buffer.concat(this.tail).toString('utf8');
  }

  usage(): Usage | null {
    return usageFromTail(this.tailText(), Buffer.concat(this.head).toString('utf8'));
  }

  /** The stream's start (a move's continuation counts its usage from it). */
  start(): Buffer {
    return Buffer.concat(this.head);
  }
}
