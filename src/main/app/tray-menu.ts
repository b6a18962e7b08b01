import type { AppState } from '../../shared/ipc.js';

/**
 * The tray, as data: which icon and which menu a given app state shows. Pure, so it is tested without
 * Electron; src/main/electron/main.ts turns the template into a native menu and maps action ids to handlers.
 */
export const TRAY_ICONS = ['setup', 'hub-serving', 'hub-idle', 'node-idle', 'node-busy', 'node-paused', 'node-offline', 'node-outside-schedule'] as const;
/** Each names assets/tray-<icon>.png. */
export type TrayIcon = (typeof TRAY_ICONS)[number];

export type TrayAction = 'toggle-pause' | 'open-dashboard' | 'add-node' | 'open-settings' | 'open-setup' | 'toggle-start-at-login' | 'quit';

export interface TrayItem {
  readonly label?: string;
  readonly type?: 'normal' | 'separator' | 'checkbox';
  readonly checked?: boolean;
  readonly enabled?: boolean;
  readonly action?: TrayAction;
}

export function trayIcon(s: AppState): TrayIcon {
  if (s.mode === null) return 'setup';
  if (s.mode === 'hub') return s.hub && (s.hub.replicas.length > 0 || s.hub.shards.length > 0) ? 'hub-serving' : 'hub-idle';
  const n = s.node;
  if (!n || !n.connected) return 'node-offline';
  if (n.paused) return 'node-paused';
  if (n.outsideSchedule) return 'node-outside-schedule';
  if (n.availability === 'paused') return 'node-paused';
  return n.availability === 'busy' ? 'node-busy' : 'node-idle';
}

/** One line saying what runs on this machine now. */
export function statusLine(s: AppState): string {
  if (s.error) return `Error: ${s.error}`;
  if (s.mode === null) return 'Not set up yet';
  if (s.mode === 'hub') {
    const h = s.hub;
    if (!h) return 'Hub starting…';
    const own = h.availability === 'paused' ? ` · this machine's GPUs paused${h.reason ? ` (${h.reason})` : ''}` : '';
    const parts = [...h.replicas.map((r) => `replica of ${r.model} (${r.where})`), ...h.shards.map((sh) => `shard of ${sh.model} (${sh.stages} stages)`)];
    return (parts.length > 0 ? `Hub: ${parts.join(', ')}` : `Hub idle · ${h.nodes} node${h.nodes === 1 ? '' : 's'}`) + own;
  }
  const n = s.node;
  if (!n) return 'Node starting…';
  if (!n.connected) return `Offline: cannot reach ${n.hub}`;
  if (n.paused) return 'Sharing paused';
  if (n.outsideSchedule) return 'Paused by the schedule';
  const parts = [...n.replicas.map((r) => `replica of ${r.model}`), ...n.stages.map((st) => `shard stage ${st.index + 1} of ${st.of} of ${st.model}`)];
  return parts.length > 0 ? `Running: ${parts.join(', ')}` : 'Idle, sharing';
}

export function buildTrayMenu(s: AppState): TrayItem[] {
  const items: TrayItem[] = [{ label: statusLine(s), enabled: false }, { type: 'separator' }];
  if (s.mode === 'node' && s.node) {
    items.push({ label: 'Pause sharing', type: 'checkbox', checked: s.node.paused, action: 'toggle-pause' });
    items.push({ label: s.node.schedule ? `Schedule: paused ${s.node.schedule}` : 'Schedule: always sharing', enabled: false });
  }
  if (s.mode === 'hub' && s.hub) items.push({ label: "Pause this machine's GPUs (nodes keep serving)", type: 'checkbox', checked: s.hub.paused, action: 'toggle-pause' });
  if (s.mode !== null) items.push({ label: 'Open dashboard', action: 'open-dashboard' });
  // The hub's dashboard shows a fresh join token (it carries the hub's address) and the command for a node.
  if (s.mode === 'hub' && s.hub) items.push({ label: 'Add a node…', action: 'add-node' });
  // Schedule, auto-pause, budgets, start at login, LAN exposure and the /v1 URL, changed without a restart.
  if (s.mode !== null) items.push({ label: 'Settings…', action: 'open-settings' });
  items.push(
    { label: s.mode === null ? 'Set up: hub or node…' : `Mode: ${s.mode} (change…)`, action: 'open-setup' },
    { label: 'Start at login', type: 'checkbox', checked: s.startAtLogin, action: 'toggle-start-at-login' },
    { type: 'separator' },
    { label: 'Quit relay', action: 'quit' },
  );
  return items;
}
