import type { Availability } from '../../shared/protocol.js';

/**
 * When a node shares its GPU: pure functions of the owner's choices and the clock, so they are table-tested.
 * Paused wins over everything: the owner's toggle (tray or `relay pause`), a weekly schedule window, or the
 * opt-in auto-pause detector.
 */
export interface PauseWindow {
  /** 0 = Sunday … 6 = Saturday. */
  readonly days: readonly number[];
  /** Minutes after midnight; `to` < `from` spans midnight into the next day. */
  readonly fromMin: number;
  readonly toMin: number;
}

const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

function parseDays(spec: string): number[] {
  const out = new Set<number>();
  for (const part of spec.toLowerCase().split(',')) {
    const [a, b] = part.split('-');
    const from = DAYS.indexOf(a!.slice(0, 3));
    const to = b === undefined ? from : DAYS.indexOf(b.slice(0, 3));
    if (from < 0 || to < 0) throw new Error(`unknown day in "${spec}" (use mon, tue, …, sun)`);
    for (let d = from; ; d = (d + 1) % 7) {
      out.add(d);
      if (d === to) break;
    }
  }
  return [...out].sort();
}

function parseTime(t: string): number {
  const m = /^(\d{1,2}):(\d{2})$/.exec(t);
  if (!m || Number(m[1]) > 24 || Number(m[2]) > 59) throw new Error(`bad time "${t}" (use HH:MM)`);
  return Number(m[1]) * 60 + Number(m[2]);
}

/** "mon-fri 09:00-17:30; sat,sun 22:00-07:00" → windows in which sharing is paused. */
export function parseSchedule(spec: string): PauseWindow[] {
  return spec
    .split(';')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const m = /^(\S+)\s+(\d{1,2}:\d{2})-(\d{1,2}:\d{2})$/.exec(entry);
      if (!m) throw new Error(`bad schedule entry "${entry}" (e.g. "mon-fri 09:00-17:30")`);
      return { days: parseDays(m[1]!), fromMin: parseTime(m[2]!), toMin: parseTime(m[3]!) };
    });
}

/** Whether local time `at` falls in a pause window. */
export function inPauseWindow(windows: readonly PauseWindow[], at: Date): boolean {
  const day = at.getDay();
  const min = at.getHours() * 60 + at.getMinutes();
  return windows.some((w) => {
    if (w.fromMin <= w.toMin) return w.days.includes(day) && min >= w.fromMin && min < w.toMin;
    // Over midnight: the evening part belongs to the listed day, the morning part to the day after.
    return (w.days.includes(day) && min >= w.fromMin) || (w.days.includes((day + 6) % 7) && min < w.toMin);
  });
}

export interface AvailabilityInputs {
  /** The machine owner's own toggle (the tray, `relay pause`). */
  readonly manualPause: boolean;
  /** The hub's owner paused this node from the dashboard: it can undo only its own pause, never the owner's. */
  readonly hubPause?: boolean;
  readonly scheduled: boolean;
  readonly autoPaused: boolean;
  readonly activeStreams: number;
}

export function availabilityOf(i: AvailabilityInputs): { state: Availability; reason: string | null } {
  if (i.manualPause) return { state: 'paused', reason: 'paused by the owner' };
  if (i.hubPause) return { state: 'paused', reason: "paused by the hub's owner" };
  if (i.scheduled) return { state: 'paused', reason: 'outside the sharing schedule' };
  if (i.autoPaused) return { state: 'paused', reason: 'another program is using the GPU (auto-pause)' };
  return { state: i.activeStreams > 0 ? 'busy' : 'idle', reason: null };
}

/**
 * Auto-pause with hysteresis: pause once other programs have used more than `thresholdMb` of GPU memory for
 * `pauseAfterMs`, resume once they have stayed under it for `resumeAfterMs`. Off by default: a desktop's own
 * CUDA contexts made a naive detector flap.
 */
export class AutoPause {
  private paused = false;
  private overSince: number | null = null;
  private underSince: number | null = null;

  constructor(private readonly opts: { thresholdMb: number; pauseAfterMs: number; resumeAfterMs: number }) {}

  update(otherProcessesMb: number, nowMs: number): boolean {
    const over = otherProcessesMb > this.opts.thresholdMb;
    if (over) {
      this.underSince = null;
      this.overSince ??= nowMs;
      if (!this.paused && nowMs - this.overSince >= this.opts.pauseAfterMs) this.paused = true;
    } else {
      this.overSince = null;
      this.underSince ??= nowMs;
      if (this.paused && nowMs - this.underSince >= this.opts.resumeAfterMs) this.paused = false;
    }
    return this.paused;
  }
}
