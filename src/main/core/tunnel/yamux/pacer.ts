/**
 * How many bytes a session's bulk streams (relay's file streams: weight pushes) may have unread at the peer.
 *
 * Everything a stream sends waits, until the peer reads it, in the sockets' buffers and the link's queue, and every
 * later frame of the session — a ping, an http request, an rpc message — waits behind it: yamux can reorder only
 * what it has not yet written. With the peer's whole window (8 MiB) in flight, a 16 Mbit/s link holds 4 s of push
 * ahead of a ping. So bulk bytes in flight are kept near TARGET_MS of the rate at which the peer reads them,
 * measured as its window updates come back, plus the link's own round trip (the least a ping took): on a fast link
 * that is the whole window (the push is not slowed), on a slow one a fraction of a second of queue (the link stays
 * full: the rate is measured with the queue in it), and a long round trip does not ratchet the cap down.
 *
 * The cap is shared by the session's bulk streams, but each may always keep STREAM_FLOOR of its own in flight: the
 * peer returns window per stream, only once GRANT_STEP of it has been read, so streams that each hold a little under
 * a step could otherwise fill a shared cap that no grant ever frees. A stream that sent its FIN gets no more grants
 * (the peer stops granting): its bytes leave the count when the stream ends (`forget`).
 *
 * Both ends must grant every GRANT_STEP: a peer that grants at half an 8 MiB window would never answer a 1 MiB cap
 * (relay's tunnel protocol 2; a hashicorp/yamux peer with its 256 KiB window grants every 128 KiB).
 */
/** A link as a session measured it: the least ping round trip (ms) and the bulk read rate (bytes/ms), null until seen. */
export interface LinkMeasure {
  readonly rttMs: number | null;
  readonly bytesPerMs: number | null;
}

export class BulkPacer {
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Bytes per ms the peer read back, smoothed; 0 until measured. */
  private rate = 0;
  private inFlight = 0;
  private since = 0;
  private returnedSince = 0;
  /** The least round trip a ping took on this session (the link without a queue); 0 until one is seen. */
  private minRtt = 0;

  /** The most that may be in flight: TARGET_MS (+ the link's round trip) of the measured rate, never under MIN_BYTES. Whole bytes (frame lengths). */
  cap(): number {
    return this.rate === 0 ? START_BYTES : Math.max(MIN_BYTES, Math.floor(this.rate * (TARGET_MS + this.minRtt)));
  }

  /** What this session measured of its link: the least ping round trip (ms) and the bulk read rate (bytes/ms); null until seen. */
  link(): LinkMeasure {
    return { rttMs: this.minRtt === 0 ? null : this.minRtt, bytesPerMs: this.rate === 0 ? null : this.rate };
  }

  /** A ping's round trip, in ms. */
  sawRtt(ms: number): void {
    if (Number.isFinite(ms) && ms >= 0 && (this.minRtt === 0 || ms < this.minRtt)) this.minRtt = ms;
  }

  /** What may be added in flight now. */
  room(): number {
    return this.cap() - this.inFlight;
  }

  /** A bulk stream sent `n` bytes. */
  sent(n: number): void {
    if (this.inFlight === 0) {
      // A burst starts: idle time before it is no measure of the link.
      this.since = this.now();
      this.returnedSince = 0;
    }
    this.inFlight += n;
  }

  /** The peer returned `n` bytes of window to a bulk stream: it has read them. */
  returned(n: number): void {
    this.forget(n);
    this.returnedSince += n;
    const now = this.now();
    const dt = now - this.since;
    if (dt < SAMPLE_MS) return;
    const sample = this.returnedSince / dt;
    this.rate = this.rate === 0 ? sample : this.rate * 0.7 + sample * 0.3;
    this.since = now;
    this.returnedSince = 0;
  }

  /** Bytes that will never be returned (their stream ended or was reset). */
  forget(n: number): void {
    this.inFlight = Math.max(0, this.inFlight - n);
  }
}

/** The queue a bulk stream may keep ahead of everything else, in ms of its measured rate. */
export const TARGET_MS = 100;
/** In flight before the first measure, and never less (at least twice the receiver's GRANT_STEP, so it flows). */
export const START_BYTES = 1024 * 1024;
export const MIN_BYTES = 512 * 1024;
/** What one bulk stream may always have in flight, whatever the others hold (two grant steps: it always gets one back). */
export const STREAM_FLOOR = 2 * 256 * 1024;
/** The shortest span one rate sample covers. */
const SAMPLE_MS = 50;
/**
 * The receiver returns window once this much (or half its window, if less) has been read: often enough for a paced
 * sender to keep MIN_BYTES in flight and measure the rate (hashicorp's rule, half the window, would stall it).
 */
export const GRANT_STEP = 256 * 1024;
