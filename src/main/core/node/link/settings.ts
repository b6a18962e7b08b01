import { chmodSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { readDurable, writeDurable } from '../../durable.js';
import { parseSchedule, type PauseWindow } from '../../availability.js';

export interface NodeSettings {
  /** What `relay up` persists in NODE_DIR/node.json. */
  hub: string;
  name: string;
  credential: string;
  /** The owner's pause (the tray, `relay pause`). */
  paused: boolean;
  /** The hub's owner paused this node from the dashboard; the hub may resume only this, never the owner's pause. */
  hubPaused?: boolean;
  schedule: string;
  cpuBudgetMb: number;
  /** MiB for models (0: no cap), or 'auto' (the default: half of the free disk plus the cache). */
  cacheBudgetMb: number | 'auto';
  /** Opt-in: pause while other programs use the GPU (NVML), with hysteresis. */
  autoPause?: boolean;
  /** The hub's certificate (PEM), pinned at join: the tunnel is wss:// and accepts this certificate only. */
  hubCert?: string | null;
}

/** What may change while the agent runs. */
export type NodeSettingsChange = Partial<Pick<NodeSettings, 'schedule' | 'autoPause' | 'cpuBudgetMb' | 'cacheBudgetMb'>>;

export function settingsPath(home: string): string {
  return join(home, 'node.json');
}

/** The node's settings (null before it joined); an unreadable node.json falls back to its last good copy. */
export function readSettings(home: string): NodeSettings | null {
  return readDurable(settingsPath(home), (text) => JSON.parse(text) as NodeSettings)?.value ?? null;
}

export function writeSettings(home: string, s: NodeSettings): void {
  mkdirSync(home, { recursive: true });
  const p = settingsPath(home);
  // fsynced temp file, last good copy kept as node.json.bak, atomic rename (see durable.ts)
  writeDurable(p, `${JSON.stringify(s, null, 2)}\n`, 0o600);
  chmodSync(p, 0o600);
}

/** The cache budget as ModelCache takes it: bytes, or 'auto'. */
export function cacheBudgetBytes(mb: number | 'auto'): number | 'auto' {
  return mb === 'auto' ? 'auto' : mb * 1024 * 1024;
}

/** A change checked against the rules `relay up` applies to its flags; the parsed schedule with it. */
export function applyChange(current: NodeSettings, change: NodeSettingsChange): { next: NodeSettings; schedule: PauseWindow[] } {
  const next = { ...current, ...change };
  let schedule: PauseWindow[];
  try {
    schedule = parseSchedule(next.schedule);
  } catch (err) {
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, `schedule: ${(err as Error).message}`);
  }
  if (!Number.isInteger(next.cpuBudgetMb) || next.cpuBudgetMb < 0) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `the CPU budget must be a whole number of MB >= 0, got ${next.cpuBudgetMb}`);
  if (next.cacheBudgetMb !== 'auto' && (!Number.isInteger(next.cacheBudgetMb) || next.cacheBudgetMb < 0))
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, `the cache budget must be "auto" or a whole number of MB >= 0, got ${next.cacheBudgetMb}`);
  return { next, schedule };
}
