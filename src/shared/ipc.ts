/**
 * The one IPC contract between the tray app's window (renderer) and its main process. The preload exposes
 * exactly these calls through contextBridge; the main process validates every payload and checks the sender.
 */
export type AppMode = 'hub' | 'node';

export interface NodeView {
  readonly name: string;
  readonly hub: string;
  readonly connected: boolean;
  readonly availability: 'idle' | 'busy' | 'paused';
  readonly reason: string | null;
  readonly paused: boolean;
  readonly schedule: string;
  readonly outsideSchedule: boolean;
  readonly replicas: readonly { replica: string; model: string }[];
  readonly stages: readonly { model: string; index: number; of: number }[];
}

export interface HubView {
  readonly url: string;
  readonly serving: boolean;
  readonly replicas: readonly { model: string; where: string }[];
  readonly shards: readonly { model: string; stages: number }[];
  readonly nodes: number;
  /** The hub's own devices: paused by the owner's toggle (the tray's checkbox), and the state with its reason. */
  readonly paused: boolean;
  readonly availability: 'idle' | 'busy' | 'paused';
  readonly reason: string | null;
  /** The /v1 URL chat clients on the network use. */
  readonly v1Url: string;
  readonly apiKeyRequired: boolean;
  /** The key the app made at setup for a LAN hub, shown (with a copy button) until the app restarts; the hub keeps only its hash. */
  readonly apiKey: string | null;
}

export interface AppState {
  readonly mode: AppMode | null;
  readonly hub: HubView | null;
  readonly node: NodeView | null;
  readonly startAtLogin: boolean;
  readonly error: string | null;
}

export interface SetupRequest {
  readonly mode: AppMode;
  /** hub mode only: listen on every interface so the household's nodes can join (default true). */
  readonly lan?: boolean;
  /** node mode only */
  readonly hubUrl?: string;
  readonly token?: string;
  readonly name?: string;
}

/** One weekly pause window of a schedule, as the settings page edits it. */
export interface ScheduleWindow {
  /** 0 = Sunday … 6 = Saturday. */
  readonly days: readonly number[];
  /** HH:MM; `to` before `from` runs over midnight. */
  readonly from: string;
  readonly to: string;
}

/** The settings page: what this machine's owner may change while relay runs (in the current mode). */
export interface SettingsView {
  readonly mode: AppMode | null;
  /** When sharing pauses each week ("mon-fri 09:00-17:30; sat 22:00-07:00"), and the same as windows. */
  readonly schedule: string;
  readonly windows: readonly ScheduleWindow[];
  readonly autoPause: boolean;
  /** Auto-pause needs NVML's per-process readings; null when they are there, else why not. */
  readonly autoPauseUnavailable: string | null;
  /** MiB of RAM lent for CPU inference (0: GPUs only). */
  readonly cpuBudgetMb: number;
  /** Node mode: MiB for pushed models, or 'auto'; null in hub mode. */
  readonly cacheBudgetMb: number | 'auto' | null;
  readonly startAtLogin: boolean;
  /** Hub mode: other machines on the network can reach the hub; null in node mode. */
  readonly lan: boolean | null;
  /** The /v1 URL chat clients use (this hub's, or the joined hub's); null before setup. */
  readonly v1Url: string | null;
}

/** A change from the settings page: only the fields given change. */
export interface SettingsChange {
  readonly schedule?: string;
  readonly autoPause?: boolean;
  readonly cpuBudgetMb?: number;
  readonly cacheBudgetMb?: number | 'auto';
  readonly startAtLogin?: boolean;
  readonly lan?: boolean;
}

/** Channel → [request payload, response]. */
export interface IpcContract {
  'relay:get-state': [null, AppState];
  'relay:setup': [SetupRequest, AppState];
  'relay:set-paused': [boolean, AppState];
  'relay:open-dashboard': [null, null];
  'relay:get-settings': [null, SettingsView];
  'relay:save-settings': [SettingsChange, SettingsView];
}

export type IpcChannel = keyof IpcContract;
export const IPC_CHANNELS: readonly IpcChannel[] = ['relay:get-state', 'relay:setup', 'relay:set-paused', 'relay:open-dashboard', 'relay:get-settings', 'relay:save-settings'];

const SETTINGS_FIELDS = ['schedule', 'autoPause', 'cpuBudgetMb', 'cacheBudgetMb', 'startAtLogin', 'lan'];
const mb = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 16 * 1024 * 1024;
/** Pushed from main to the window whenever the state changes. */
export const STATE_EVENT = 'relay:state';

export type IpcResult<T> = { ok: true; value: T } | { ok: false; code: string; message: string };

/** What the preload puts on the app pages' `window.relay`: one method per channel of IpcContract, and the state event. */
export interface RelayBridge {
  getState(): Promise<IpcResult<IpcContract['relay:get-state'][1]>>;
  setup(req: IpcContract['relay:setup'][0]): Promise<IpcResult<IpcContract['relay:setup'][1]>>;
  setPaused(paused: IpcContract['relay:set-paused'][0]): Promise<IpcResult<IpcContract['relay:set-paused'][1]>>;
  openDashboard(): Promise<IpcResult<IpcContract['relay:open-dashboard'][1]>>;
  getSettings(): Promise<IpcResult<IpcContract['relay:get-settings'][1]>>;
  saveSettings(change: IpcContract['relay:save-settings'][0]): Promise<IpcResult<IpcContract['relay:save-settings'][1]>>;
  onState(fn: (state: AppState) => void): void;
}

/** Payload checks, pure: a renderer that sends anything else gets an INVALID_ARGUMENT result. */
export function validateIpc<C extends IpcChannel>(channel: C, payload: unknown): payload is IpcContract[C][0] {
  switch (channel) {
    case 'relay:get-state':
    case 'relay:open-dashboard':
    case 'relay:get-settings':
      return payload === null || payload === undefined;
    case 'relay:save-settings': {
      // Types and ranges here; the schedule's syntax is checked where it is parsed (the same parser as --schedule).
      if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return false;
      const p = payload as Record<string, unknown>;
      return (
        Object.keys(p).every((k) => SETTINGS_FIELDS.includes(k)) &&
        (p.schedule === undefined || (typeof p.schedule === 'string' && p.schedule.length <= 1000)) &&
        (p.autoPause === undefined || typeof p.autoPause === 'boolean') &&
        (p.cpuBudgetMb === undefined || mb(p.cpuBudgetMb)) &&
        (p.cacheBudgetMb === undefined || p.cacheBudgetMb === 'auto' || mb(p.cacheBudgetMb)) &&
        (p.startAtLogin === undefined || typeof p.startAtLogin === 'boolean') &&
        (p.lan === undefined || typeof p.lan === 'boolean')
      );
    }
    case 'relay:set-paused':
      return typeof payload === 'boolean';
    case 'relay:setup': {
      if (typeof payload !== 'object' || payload === null) return false;
      const p = payload as Record<string, unknown>;
      if (p.mode === 'hub') return p.lan === undefined || typeof p.lan === 'boolean';
      if (p.mode !== 'node') return false;
      return (
        typeof p.hubUrl === 'string' &&
        /^https?:\/\/[^\s]+$/.test(p.hubUrl) &&
        typeof p.token === 'string' &&
        p.token.length > 0 &&
        p.token.length < 4096 &&
        (p.name === undefined || (typeof p.name === 'string' && /^[A-Za-z0-9._-]{1,64}$/.test(p.name)))
      );
    }
    default:
      return false;
  }
}
