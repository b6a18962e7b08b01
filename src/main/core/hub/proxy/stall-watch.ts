import type { Lease } from '../../scheduler/placements/placement.js';

/**
 * The stall watch of one request: one that hears nothing for `lease.stallMs()` (model-aware, a few seconds at most)
 * has its placement looked at — its nodes pinged, its processes checked — and again after each quiet spell. A dead
 * node or a hung process fails the placement, which breaks the upstream: the client gets its error event, or the
 * request goes to another placement if nothing reached it yet. Per chunk it costs one clock read (`heard`).
 */
export class StallWatch {
  private lastHeard = Date.now();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(private readonly lease: Pick<Lease, 'stallMs' | 'probe'>) {}

  start(): void {
    if (!this.stopped) this.timer = setTimeout(this.look, this.lease.stallMs());
  }

  heard(): void {
    this.lastHeard = Date.now();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private readonly look = (): void => {
    if (this.stopped) return;
    const quiet = Date.now() - this.lastHeard;
    const limit = this.lease.stallMs();
    if (quiet < limit) {
      this.timer = setTimeout(this.look, limit - quiet);
      return;
    }
    void this.lease.probe().finally(() => {
      this.lastHeard = Date.now(); // all was well: the next look after another quiet spell
      if (!this.stopped) this.timer = setTimeout(this.look, this.lease.stallMs());
    });
  };
}
