import type { Logger } from 'pino';
import type { Availability } from '../../../../shared/protocol.js';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { autoPauseSupport, otherProcessesGpuMb } from '../../gpu/nvml.js';
import { AutoPause, availabilityOf, inPauseWindow, parseSchedule, type PauseWindow } from '../../availability.js';
import type { Store } from '../../store/store.js';

/**
 * The hub's own devices have an availability with a node's semantics: its owner's pause toggle (the CLI's
 * `relay pause --hub`, the dashboard, the tray), a weekly schedule, and the opt-in auto-pause. Paused, the
 * hub's placements stop and new requests go to nodes. The toggle and the settings persist in the store.
 */
export interface HubAvailabilitySettings {
  readonly paused: boolean;
  readonly schedule: string;
  readonly autoPause: boolean;
}

export class HubAvailability {
  private windows: PauseWindow[];
  /** The settings in force (written through to the store). */
  private current: HubAvailabilitySettings;
  private saving: Promise<void> = Promise.resolve();
  private autoPause = HubAvailability.detector();

  /** Auto-pause's detector: over 1 GiB of other programs' GPU memory for 30 s pauses, under it for 2 min resumes. */
  private static detector(): AutoPause {
    return new AutoPause({ thresholdMb: 1024, pauseAfterMs: 30_000, resumeAfterMs: 120_000 });
  }
  private autoPaused = false;
  private last: Availability | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly deps: {
      store: Store;
      log: Logger;
      /** Placements running on the hub's devices (busy vs idle) and their pids (not "other programs"). */
      activeStreams: () => number;
      ownPids: () => Set<number>;
      /** Called when the devices become paused, with the reason: stop the hub's placements. */
      onPaused: (reason: string) => void;
      tickMs?: number;
      now?: () => Date;
    },
    initial: Partial<HubAvailabilitySettings> = {},
  ) {
    // Flags given at start (--schedule, --auto-pause) override the stored settings and are stored.
    const saved = deps.store.data.hub_availability;
    const s = { paused: saved?.paused ?? false, schedule: initial.schedule ?? saved?.schedule ?? '', autoPause: initial.autoPause ?? saved?.auto_pause ?? false };
    this.windows = HubAvailability.parse(s.schedule);
    this.current = s;
    if (initial.schedule !== undefined || initial.autoPause !== undefined) this.saving = this.save(s);
    if (s.autoPause && !autoPauseSupport().available) deps.log.warn(`hub auto-pause stays off on this machine: ${autoPauseSupport().why}`);
    this.timer = setInterval(() => this.tick(), deps.tickMs ?? 5000);
    this.timer.unref();
    this.tick();
  }

  private static parse(schedule: string): PauseWindow[] {
    try {
      return parseSchedule(schedule);
    } catch (err) {
      throw new RelayError(ErrorCode.INVALID_ARGUMENT, `hub schedule: ${(err as Error).message}`);
    }
  }

  settings(): HubAvailabilitySettings {
    return this.current;
  }

  private async save(s: HubAvailabilitySettings): Promise<void> {
    await this.deps.store.update((data) => {
      data.hub_availability = { paused: s.paused, schedule: s.schedule, auto_pause: s.autoPause };
    });
  }

  state(): { state: Availability; reason: string | null } {
    const s = this.settings();
    return availabilityOf({
      manualPause: s.paused,
      scheduled: inPauseWindow(this.windows, this.deps.now?.() ?? new Date()),
      autoPaused: this.autoPaused,
      activeStreams: this.deps.activeStreams(),
    });
  }

  paused(): boolean {
    return this.state().state === 'paused';
  }

  async set(change: Partial<HubAvailabilitySettings>): Promise<void> {
    const next = { ...this.current, ...change };
    const windows = HubAvailability.parse(next.schedule);
    await this.saving;
    await this.save(next);
    if (next.autoPause !== this.current.autoPause) {
      this.autoPause = HubAvailability.detector(); // no state from the last time it was on
      this.autoPaused = false;
    }
    this.current = next;
    this.windows = windows;
    this.tick();
  }

  /** Re-evaluates the schedule and auto-pause; a change to paused stops the hub's placements. */
  tick(): void {
    if (this.settings().autoPause) {
      const other = otherProcessesGpuMb(this.deps.ownPids());
      if (other !== null) this.autoPaused = this.autoPause.update(other, Date.now());
    } else this.autoPaused = false;
    const a = this.state();
    const was = this.last;
    this.last = a.state;
    if (a.state === 'paused' && was !== 'paused') {
      this.deps.log.info({ reason: a.reason }, "the hub's own devices are paused: its placements stop, requests go to nodes");
      this.deps.onPaused(a.reason ?? 'paused');
    } else if (a.state !== 'paused' && was === 'paused') this.deps.log.info("the hub's own devices are available again");
  }

  /** Stops the clock; resolves once the settings given at start are stored. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.saving;
  }
}
