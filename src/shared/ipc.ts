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

/** Channel → [request payload, response]. */
export interface IpcContract {
  'relay:get-state': [null, AppState];
  'relay:setup': [SetupRequest, AppState];
  'relay:set-paused': [boolean, AppState];
  'relay:open-dashboard': [null, null];
}

export type IpcChannel = keyof IpcContract;
export const IPC_CHANNELS: readonly IpcChannel[] = ['relay:get-state', 'relay:setup', 'relay:set-paused', 'relay:open-dashboard'];
/** Pushed from main to the window whenever the state changes. */
export const STATE_EVENT = 'relay:state';

export type IpcResult<T> = { ok: true; value: T } | { ok: false; code: string; message: string };

/** Payload checks, pure: a renderer that sends anything else gets an INVALID_ARGUMENT result. */
export function validateIpc<C extends IpcChannel>(channel: C, payload: unknown): payload is IpcContract[C][0] {
  switch (channel) {
    case 'relay:get-state':
    case 'relay:open-dashboard':
      return payload === null || payload === undefined;
    case 'relay:set-paused':
      return typeof payload === 'boolean';
    case 'relay:setup': {
      if (typeof payload !== 'object' || payload === null) return false;
      const p = payload as Record<string, unknown>;
      if (p.mode === 'hub') return p.lan === undefined || typeof p.lan === 'boolean';
      if (p.mode !== 'node') return false;
      return typeof p.hubUrl === 'string' && /^https?:\/\/[^\s]+$/.test(p.hubUrl)
        && typeof p.token === 'string' && p.token.length > 0 && p.token.length < 4096
        && (p.name === undefined || (typeof p.name === 'string' && /^[A-Za-z0-9._-]{1,64}$/.test(p.name)));
    }
    default:
      return false;
  }
}
