/**
 * The tray app: one instance per user, hub or node mode, the headless core unchanged inside the main
 * process. This is the only folder that imports electron (test/arch checks it).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { app, BrowserWindow, ipcMain, Menu, nativeImage, Tray, type IpcMainInvokeEvent, type MenuItemConstructorOptions } from 'electron';
import { IPC_CHANNELS, STATE_EVENT, validateIpc, type AppState, type IpcChannel, type IpcResult, type SetupRequest } from '../../shared/ipc.js';
import { buildTrayMenu, trayIcon, type TrayAction } from '../app/tray-menu.js';
import { hubConfigFromEnv } from '../core/config.js';
import { startHub, type Hub } from '../core/hub/index.js';
import { ensureLlama } from '../core/llama/install.js';
import { terminateAll } from '../core/llama/supervisor.js';
import { createLogger } from '../core/log.js';
import { inPauseWindow, parseSchedule } from '../core/node/availability.js';
import { NodeAgent, joinHub, readSettings, writeSettings } from '../core/node/agent.js';

interface Settings {
  mode: 'hub' | 'node' | null;
  hubPort: number;
  cpuBudgetMb: number;
  startAtLogin: boolean;
}

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const asset = (f: string): string => join(root, 'assets', f);
const page = (f: string): string => join(root, 'src', 'renderer', f);
const log = createLogger({ name: 'tray', pretty: false });

if (!app.requestSingleInstanceLock()) app.quit();

const userData = (): string => app.getPath('userData');
const settingsFile = (): string => join(userData(), 'settings.json');
function loadSettings(): Settings {
  const d: Settings = { mode: null, hubPort: 7070, cpuBudgetMb: 0, startAtLogin: false };
  try {
    return existsSync(settingsFile()) ? { ...d, ...(JSON.parse(readFileSync(settingsFile(), 'utf8')) as Partial<Settings>) } : d;
  } catch {
    return d;
  }
}
function saveSettings(s: Settings): void {
  mkdirSync(userData(), { recursive: true });
  writeFileSync(settingsFile(), JSON.stringify(s, null, 2));
}

let settings: Settings;
let hub: Hub | null = null;
let agent: NodeAgent | null = null;
let tray: Tray | null = null;
let win: BrowserWindow | null = null;
let lastError: string | null = null;

function state(): AppState {
  const nodeSettings = settings.mode === 'node' ? readSettings(join(userData(), 'node')) : null;
  const nodeStatus = agent?.statusJson();
  return {
    mode: settings.mode,
    startAtLogin: settings.startAtLogin,
    error: lastError,
    hub: hub ? {
      url: hub.url,
      serving: true,
      replicas: hub.scheduler.status().filter((r) => r.state === 'ready').map((r) => ({ model: r.model, where: r.node ?? 'hub' })),
      shards: hub.scheduler.shardStatus().filter((s) => s.state === 'ready').map((s) => ({ model: s.model, stages: s.stages.length })),
      nodes: hub.nodes.connected().length,
    } : null,
    node: agent && nodeSettings && nodeStatus ? {
      name: nodeSettings.name,
      hub: nodeSettings.hub,
      connected: agent.connected,
      availability: agent.availability().state,
      reason: agent.availability().reason,
      paused: nodeSettings.paused,
      schedule: nodeSettings.schedule,
      outsideSchedule: inPauseWindow(parseSchedule(nodeSettings.schedule), new Date()),
      replicas: agent.running().replicas,
      stages: Array.from({ length: agent.running().rpcStages }, () => ({ model: 'a shard', index: 0, of: 0 })),
    } : null,
  };
}

function refresh(): void {
  const s = state();
  if (tray) {
    tray.setImage(nativeImage.createFromPath(asset(`tray-${trayIcon(s)}.png`)));
    const template: MenuItemConstructorOptions[] = buildTrayMenu(s).map((i) => ({
      label: i.label, type: i.type ?? 'normal', checked: i.checked, enabled: i.enabled ?? true,
      click: i.action ? () => void onAction(i.action!) : undefined,
    }));
    tray.setContextMenu(Menu.buildFromTemplate(template));
    tray.setToolTip(`relay — ${template[0]?.label ?? ''}`);
  }
  win?.webContents.send(STATE_EVENT, s);
}

async function startMode(): Promise<void> {
  lastError = null;
  try {
    const install = await ensureLlama({ progress: (l) => log.info(`[llama build] ${l}`) });
    if (settings.mode === 'hub') {
      hub = await startHub(hubConfigFromEnv(process.env, { home: join(userData(), 'hub'), port: settings.hubPort, cpuBudgetMb: settings.cpuBudgetMb }), { log, install });
    } else if (settings.mode === 'node') {
      const home = join(userData(), 'node');
      const s = readSettings(home);
      if (!s) throw new Error('node mode is not set up: choose it again with a hub URL and a join token');
      agent = new NodeAgent(home, s, { log, install });
      agent.on('connected', refresh);
      agent.on('disconnected', refresh);
      agent.on('availability', refresh);
      agent.on('fatal', (err: Error) => {
        lastError = err.message;
        refresh();
      });
      await agent.start();
    }
  } catch (err) {
    lastError = (err as Error).message;
  }
  refresh();
}

async function stopMode(): Promise<void> {
  await agent?.stop();
  agent = null;
  await hub?.close();
  hub = null;
  await terminateAll(5000);
}

function openWindow(file: string | null): void {
  const url = file ? null : settings.mode === 'hub' ? hub?.url : readSettings(join(userData(), 'node'))?.hub;
  if (!win || win.isDestroyed()) {
    win = new BrowserWindow({
      width: 1100, height: 800, title: 'relay',
      webPreferences: { preload: join(root, 'dist', 'src', 'main', 'electron', 'preload.cjs'), contextIsolation: true, nodeIntegration: false, sandbox: true },
    });
  }
  if (file) void win.loadFile(page(file));
  else if (url) void win.loadURL(url);
  win.show();
}

async function onAction(a: TrayAction): Promise<void> {
  switch (a) {
    case 'toggle-pause':
      if (agent) await agent.setPaused(!readSettings(join(userData(), 'node'))?.paused);
      break;
    case 'open-dashboard':
      openWindow(null);
      break;
    case 'open-setup':
      openWindow('setup.html');
      break;
    case 'toggle-start-at-login':
      settings.startAtLogin = !settings.startAtLogin;
      app.setLoginItemSettings({ openAtLogin: settings.startAtLogin });
      saveSettings(settings);
      break;
    case 'quit':
      app.quit();
      return;
  }
  refresh();
}

/** Handlers answer only our own windows: the setup page (file://) or the hub's dashboard origin. */
function trustedSender(e: IpcMainInvokeEvent): boolean {
  const url = e.senderFrame?.url ?? '';
  const dash = settings.mode === 'hub' ? hub?.url : readSettings(join(userData(), 'node'))?.hub;
  return url.startsWith(`file://${page('')}`) || (dash !== undefined && url.startsWith(dash));
}

async function handle(channel: IpcChannel, payload: unknown): Promise<unknown> {
  switch (channel) {
    case 'relay:get-state':
      return state();
    case 'relay:set-paused':
      if (!agent) throw new Error('pausing applies to node mode');
      await agent.setPaused(payload as boolean);
      return state();
    case 'relay:open-dashboard':
      openWindow(null);
      return null;
    case 'relay:setup': {
      const req = payload as SetupRequest;
      await stopMode();
      if (req.mode === 'node') {
        const name = req.name ?? hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 64);
        const credential = await joinHub(req.hubUrl!, req.token!, name);
        const home = join(userData(), 'node');
        const prev = readSettings(home);
        writeSettings(home, { hub: req.hubUrl!, name, credential, paused: false, schedule: prev?.schedule ?? '', cpuBudgetMb: prev?.cpuBudgetMb ?? 0, cacheBudgetMb: prev?.cacheBudgetMb ?? 0 });
      }
      settings.mode = req.mode;
      saveSettings(settings);
      await startMode();
      return state();
    }
  }
}

for (const channel of IPC_CHANNELS) {
  ipcMain.handle(channel, async (e, payload: unknown): Promise<IpcResult<unknown>> => {
    if (!trustedSender(e)) return { ok: false, code: 'FORBIDDEN', message: 'unknown sender' };
    if (!validateIpc(channel, payload)) return { ok: false, code: 'INVALID_ARGUMENT', message: `bad payload for ${channel}` };
    try {
      return { ok: true, value: await handle(channel, payload) };
    } catch (err) {
      return { ok: false, code: 'FAILED', message: (err as Error).message };
    }
  });
}

app.on('second-instance', () => openWindow(settings?.mode ? null : 'setup.html'));
app.on('window-all-closed', () => undefined); // a tray app keeps running without windows
app.on('before-quit', (e) => {
  if (hub || agent) {
    e.preventDefault();
    void stopMode().then(() => app.quit());
  }
});

void app.whenReady().then(async () => {
  settings = loadSettings();
  tray = new Tray(nativeImage.createFromPath(asset('tray-setup.png')));
  refresh();
  setInterval(refresh, 5000).unref();
  if (settings.mode === null) openWindow('setup.html');
  else await startMode();
});
