import type { RelayError } from '../../../../shared/errors.js';
import type { Continuing } from './proxy-types.js';
import type { SentReader } from './sent.js';
import { SseSplitter } from './sse.js';

/**
 * What of llama-server's answer goes on to the client (proxy.ts's hot path): for an answer that may move, whole
 * events only, each read into what the client was given (sent.ts) — so whether it can move never depends on where a
 * read split —; for a continuation, its stream's events (stitch.ts, retell.ts); for anything else, the bytes as
 * they came.
 */
export class ClientEvents {
  private readonly gate: SseSplitter | null;

  constructor(private readonly o: { readonly reader?: SentReader | undefined; readonly continuing?: Continuing | undefined }) {
    this.gate = o.reader && !o.continuing ? new SseSplitter() : null;
  }

  /** The payload that arrived; what goes on (whole events as text, or the buffers as they came). */
  take(received: Buffer[]): string | Buffer[] {
    const { reader, continuing } = this.o;
    let out: string;
    if (continuing) out = continuing.push(Buffer.concat(received));
    else if (this.gate) out = received.flatMap((b) => this.gate!.push(b).map((ev) => ev.raw)).join('');
    else return received;
    reader?.push(out);
    return out;
  }

  /** llama-server's own chunks went to the client as they came: the payload of those whole chunks. */
  given(whole: Buffer[]): void {
    for (const b of whole) this.o.reader?.push(b);
  }

  /** A continuation's llama-server reported a failure: nothing more goes on. */
  get failed(): RelayError | null {
    return this.o.continuing?.failed ?? null;
  }
}
