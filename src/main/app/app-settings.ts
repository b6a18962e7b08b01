import { mkdirSync } from 'node:fs';
import type { AppMode, ScheduleWindow } from '../../shared/ipc.js';
import { readDurable, writeDurable } from '../core/durable.js';
import { parseSchedule } from '../core/availability.js';

/** The app's own pages (src/renderer/<page>.html). */
export type AppPage = 'setup' | 'settings';

export interface AppSettings {
  mode: AppMode | null;
  /** The embedded hub's port (hub mode); 0 picks a free one. */
  hubPort: number;
  /** The embedded hub's address: 0.0.0.0 so nodes can join (setup's default), or 127.0.0.1. */
  hubListen: string;
  /** Opt-in CPU budget for inference on this machine (MiB; 0 = GPUs only), in either mode. */
  cpuBudgetMb: number;
  startAtLogin: boolean;
}

export const DEFAULT_SETTINGS: AppSettings = { mode: null, hubPort: 7070, hubListen: '127.0.0.1', cpuBudgetMb: 0, startAtLogin: false };

/**
 * settings.json in the app's data dir: the saved settings over `defaults`; an unreadable file falls back to its
 * last good copy (`recovered` says why), and with none to the defaults and an `error` to show (the file is left).
 */
export function readAppSettings(file: string, defaults: AppSettings): { settings: AppSettings; recovered: string | null; error: string | null } {
  try {
    const read = readDurable(file, (text) => JSON.parse(text) as Partial<AppSettings>);
    if (!read) return { settings: defaults, recovered: null, error: null };
    const saved = read.value;
    return { settings: { ...defaults, ...saved, mode: saved.mode === 'hub' || saved.mode === 'node' ? saved.mode : null }, recovered: read.recovered, error: null };
  } catch (err) {
    return { settings: defaults, recovered: null, error: `settings.json is unreadable (${(err as Error).message}); set up again` };
  }
}

/** Written durably (fsynced temp file, the last good copy kept as settings.json.bak). */
export function writeAppSettings(dir: string, file: string, s: AppSettings): void {
  mkdirSync(dir, { recursive: true });
  writeDurable(file, `${JSON.stringify(s, null, 2)}\n`);
}

/** A schedule as the settings page's rows (an unparsable one, which no save lets in, as none). */
export function scheduleWindows(schedule: string): ScheduleWindow[] {
  const hhmm = (min: number): string => `${String(Math.floor(min / 60)).padStart(2, '0')}:${String(min % 60).padStart(2, '0')}`;
  try {
    return parseSchedule(schedule).map((w) => ({ days: [...w.days], from: hhmm(w.fromMin), to: hhmm(w.toMin) }));
  } catch {
    return [];
  }
}
