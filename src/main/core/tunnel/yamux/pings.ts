import { ErrorCode, RelayError } from '../../../../shared/errors.js';

interface Pending {
  readonly t0: number;
  readonly quietMs: number;
  readonly maxMs: number;
  readonly resolve: (ms: number) => void;
  readonly reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * A session's outstanding pings and what counts as an answer.
 *
 * A ping's answer travels behind whatever the peer sent before it, and the ping itself behind what this side sent:
 * on a slow link that can be seconds of bulk bytes. So a ping fails only when the peer has been silent — not one
 * byte from it — for `quietMs` since the ping went out, or when `maxMs` pass without its answer while bytes still
 * come (a peer that talks but never answers). A dead link or a stopped process is silent: found in `quietMs`.
 */
export class Pings {
  private lastId = 0;
  private readonly pending = new Map<number, Pending>();
  /** When the peer's last byte arrived (performance.now()). */
  private heardAt = performance.now();

  constructor(
    private readonly send: (id: number) => void,
    /** Each answered ping's round trip (ms). */
    private readonly onRtt: (ms: number) => void = () => undefined,
  ) {}

  /** Bytes from the peer arrived. */
  heard(): void {
    this.heardAt = performance.now();
  }

  ping(quietMs: number, maxMs: number): Promise<number> {
    const id = (this.lastId = (this.lastId + 1) >>> 0);
    return new Promise((resolve, reject) => {
      const p: Pending = { t0: performance.now(), quietMs, maxMs: Math.max(quietMs, maxMs), resolve, reject, timer: setTimeout(() => this.check(id), quietMs) };
      p.timer.unref();
      this.pending.set(id, p);
      this.send(id);
    });
  }

  /** The peer answered ping `id`. */
  answered(id: number): void {
    const p = this.pending.get(id);
    if (!p) return;
    clearTimeout(p.timer);
    this.pending.delete(id);
    const rtt = performance.now() - p.t0;
    this.onRtt(rtt);
    p.resolve(rtt);
  }

  /** The session is gone: every outstanding ping fails with its reason. */
  clear(err: Error): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
  }

  private check(id: number): void {
    const p = this.pending.get(id);
    if (!p) return;
    const now = performance.now();
    const quietSince = Math.max(p.t0, this.heardAt);
    /** `within`: how the peer failed, for the caller's own message. */
    const fail = (within: string): void => {
      this.pending.delete(id);
      p.reject(new RelayError(ErrorCode.KEEPALIVE_TIMEOUT, `the tunnel peer did not answer a ping within ${within}`, { within }));
    };
    if (now - quietSince >= p.quietMs) return fail(`${p.quietMs} ms`);
    if (now - p.t0 >= p.maxMs) return fail(`${p.maxMs} ms (its other bytes still arrived)`);
    p.timer = setTimeout(() => this.check(id), Math.max(1, Math.min(quietSince + p.quietMs, p.t0 + p.maxMs) - now));
    p.timer.unref();
  }
}
