/**
 * The tray app's brain, without Electron: settings in the app's data dir, the hub embedded in this process
 * or the node agent, the state the tray and the window show, tray actions and the IPC handlers (sender and
 * payload checked). src/main/electron/main.ts is a thin shell around it (Tray, Menu, BrowserWindow,
 * ipcMain); this file is tested in plain Node with the real hub, node agent and llama.cpp processes.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { type AppState, type IpcChannel, type IpcResult, type SettingsChange, type SettingsView, type SetupRequest } from '../../shared/ipc.js';
import { hubConfigFromEnv, processEnv } from '../core/config.js';
import { startHub, type Hub } from '../core/hub/index.js';
import { ensureLlama } from '../core/llama/build.js';
import { terminateAll } from '../core/llama/supervisor.js';
import { NodeAgent } from '../core/node/agent.js';
import { readSettings, writeSettings } from '../core/node/link/settings.js';
import { joinHub } from '../core/node/link/hub-client.js';
import { ipcSenderAllowed, navigationAllowed } from './navigation.js';
import { gateIpc } from './ipc-gate.js';
import { dashboardOpenUrl, loopbackUrl } from './hub-urls.js';
import { beyondLoopback } from '../core/hub/http/guard.js';
import type { TrayAction } from './tray-menu.js';
import { appState, settingsView } from './app-state.js';
import { DEFAULT_SETTINGS, readAppSettings, writeAppSettings, type AppPage, type AppSettings } from './app-settings.js';

export { DEFAULT_SETTINGS, scheduleWindows, type AppPage, type AppSettings } from './app-settings.js';

/** What the controller asks of its host: Electron in the app, a recorder in tests. */
export interface AppShell {
  /** Show one of the app's pages (setup, settings), or the dashboard at `url`. */
  openWindow(target: { page: AppPage } | { url: string }): void;
  setLoginItem(openAtLogin: boolean): void;
  quit(): void;
  /** The state changed: redraw the tray, push it to the window. */
  render(state: AppState): void;
}

export interface AppControllerOptions {
  /** The app's data dir (Electron's userData): settings.json, hub/ and node/ live here. */
  readonly userData: string;
  readonly shell: AppShell;
  readonly log: Logger;
  /** URL prefix of the app's own pages (file://…/renderer/): the only sender allowed to run setup. */
  readonly pagesUrl: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Settings a first run starts from (tests: port 0 and a CPU budget). */
  readonly defaults?: Partial<AppSettings>;
  /** A packaged app's llama binaries (extraResources): used instead of building or the user's cache. */
  readonly llamaBinDir?: string;
  readonly heartbeatMs?: number;
}

export class AppController {
  settings: AppSettings;
  hub: Hub | null = null;
  agent: NodeAgent | null = null;
  private lastError: string | null = null;
  /** The API key made at setup for a LAN hub: shown this session, never stored (the hub keeps its hash). */
  private setupKey: string | null = null;
  private starting: Promise<void> | null = null;
  private setups: Promise<void> = Promise.resolve();
  /** The port a hub restarted for a new address keeps (nodes joined at it come back by themselves). */
  private keepPort: number | null = null;

  constructor(private readonly opts: AppControllerOptions) {
    if (!opts.pagesUrl.endsWith('/')) throw new Error('pagesUrl must name a folder (end with /)');
    this.settings = this.loadSettings();
  }

  get nodeHome(): string {
    return join(this.opts.userData, 'node');
  }

  private get settingsFile(): string {
    return join(this.opts.userData, 'settings.json');
  }

  private loadSettings(): AppSettings {
    const r = readAppSettings(this.settingsFile, { ...DEFAULT_SETTINGS, ...this.opts.defaults });
    if (r.recovered) this.opts.log.warn({ why: r.recovered }, 'settings.json was unreadable: started from its last good copy');
    // A damaged settings file: start as a first run, and say so; the file is left for the user.
    if (r.error) this.lastError = r.error;
    return r.settings;
  }

  private saveSettings(): void {
    writeAppSettings(this.opts.userData, this.settingsFile, this.settings);
  }

  /** The app started: the setup page on a first run, otherwise the chosen mode. */
  async start(): Promise<void> {
    this.render();
    if (this.settings.mode === null) this.opts.shell.openWindow({ page: 'setup' });
    else await this.launch();
  }

  /** Start the chosen mode; stop() waits for a start in progress, so a quit during one leaves nothing behind. */
  private async launch(): Promise<void> {
    this.starting = this.startMode();
    try {
      await this.starting;
    } finally {
      this.starting = null;
    }
  }

  /** Whether the window may navigate to `url`: the app's own pages or the dashboard's origin (see navigation.ts). */
  navigationAllowed(url: string): boolean {
    return navigationAllowed(url, this.opts.pagesUrl, this.dashboardUrl());
  }

  /** The dashboard this app shows: its own hub's, or (node mode) the hub it joined. */
  dashboardUrl(): string | null {
    if (this.settings.mode === 'hub') return this.hub ? loopbackUrl(this.hub.url) : null;
    if (this.settings.mode === 'node') return readSettings(this.nodeHome)?.hub ?? null;
    return null;
  }

  state(): AppState {
    return appState({ settings: this.settings, hub: this.hub, agent: this.agent, nodeHome: this.nodeHome, error: this.lastError, apiKey: this.setupKey });
  }

  render(): void {
    this.opts.shell.render(this.state());
  }

  private async startMode(): Promise<void> {
    this.lastError = null;
    const env = this.opts.llamaBinDir ? { ...(this.opts.env ?? processEnv()), RELAY_LLAMA_BIN_DIR: this.opts.llamaBinDir } : (this.opts.env ?? processEnv());
    const log = this.opts.log;
    try {
      const install = await ensureLlama({ env, progress: (l) => log.info(`[llama build] ${l}`) });
      if (this.settings.mode === 'hub') {
        const config = hubConfigFromEnv(env, {
          home: join(this.opts.userData, 'hub'),
          host: this.settings.hubListen,
          port: this.keepPort ?? this.settings.hubPort,
          cpuBudgetMb: this.settings.cpuBudgetMb,
        });
        this.keepPort = null;
        this.hub = await startHub(config, { log, install });
      } else if (this.settings.mode === 'node') {
        const s = readSettings(this.nodeHome);
        if (!s) throw new Error('node mode is not set up: choose it again with a hub URL and a join token');
        const agent = new NodeAgent(this.nodeHome, s, { log, install, heartbeatMs: this.opts.heartbeatMs });
        this.agent = agent;
        for (const ev of ['connected', 'disconnected', 'availability', 'running']) agent.on(ev, () => this.render());
        agent.on('fatal', (err: Error) => {
          this.lastError = err.message;
          this.render();
        });
        await agent.start();
      }
    } catch (err) {
      this.lastError = (err as Error).message;
      log.error({ err: this.lastError }, 'the tray app could not start its mode');
    }
    this.render();
  }

  /** Stop the hub or the agent and every child process they started (llama-server, ggml-rpc-server). */
  async stop(): Promise<void> {
    await this.starting;
    const agent = this.agent;
    const hub = this.hub;
    this.agent = null;
    this.hub = null;
    await agent?.stop();
    await hub?.close();
    await terminateAll(5000);
  }

  /** Is anything running that quitting must stop first? */
  get running(): boolean {
    return this.hub !== null || this.agent !== null;
  }

  async onTray(a: TrayAction): Promise<void> {
    switch (a) {
      case 'toggle-pause':
        // The same call `relay pause` reaches through the node's local API: the agent tells the hub,
        // which stops this node's placements.
        if (this.agent) await this.agent.setPaused(!readSettings(this.nodeHome)?.paused);
        // Hub mode: the hub's own devices (its placements stop, requests go to nodes).
        if (this.hub) await this.hub.availability.set({ paused: !this.hub.availability.settings().paused });
        break;
      case 'open-dashboard': {
        const url = this.dashboardUrl();
        const node = this.settings.mode === 'node' ? readSettings(this.nodeHome) : null;
        this.opts.shell.openWindow(url ? { url: await dashboardOpenUrl(url, node, this.opts.log) } : { page: 'setup' });
        break;
      }
      case 'add-node': {
        const url = this.dashboardUrl();
        if (url && this.settings.mode === 'hub') this.opts.shell.openWindow({ url: `${url}/#add-node` });
        break;
      }
      case 'open-setup':
        this.opts.shell.openWindow({ page: 'setup' });
        break;
      case 'open-settings':
        this.opts.shell.openWindow({ page: this.settings.mode === null ? 'setup' : 'settings' });
        break;
      case 'toggle-start-at-login':
        this.settings.startAtLogin = !this.settings.startAtLogin;
        this.opts.shell.setLoginItem(this.settings.startAtLogin);
        this.saveSettings();
        break;
      case 'quit':
        this.opts.shell.quit();
        return;
    }
    this.render();
  }

  /** One IPC call from a window: checked, then run. Never throws; errors come back as a coded result. */
  handleIpc(channel: string, payload: unknown, senderUrl: string): Promise<IpcResult<unknown>> {
    return gateIpc(
      channel,
      payload,
      senderUrl,
      (ch, url) => ipcSenderAllowed(ch, url, this.opts.pagesUrl, this.dashboardUrl()), // which page may call what: navigation.ts
      (ch, p) => this.run(ch, p),
    );
  }

  private async run(channel: IpcChannel, payload: unknown): Promise<unknown> {
    switch (channel) {
      case 'relay:get-state':
        return this.state();
      case 'relay:set-paused':
        if (!this.agent) throw new Error('pausing applies to node mode');
        await this.agent.setPaused(payload as boolean);
        this.render();
        return this.state();
      case 'relay:open-dashboard':
        await this.onTray('open-dashboard');
        return null;
      case 'relay:get-settings':
        return this.settingsView();
      case 'relay:save-settings':
        await this.oneAtATime(() => this.changeSettings(payload as SettingsChange));
        this.render();
        return this.settingsView();
      case 'relay:setup':
        await this.oneAtATime(() => this.setup(payload as SetupRequest));
        return this.state();
    }
  }

  /** Setups and settings changes run one after another (a double-clicked Start, two windows). */
  private oneAtATime(job: () => Promise<void>): Promise<void> {
    const run = this.setups.then(job);
    this.setups = run.catch(() => undefined);
    return run;
  }

  /** What the settings page shows (app-state.ts). */
  settingsView(): SettingsView {
    return settingsView({ settings: this.settings, hub: this.hub, node: this.settings.mode === 'node' ? (this.agent?.current() ?? readSettings(this.nodeHome)) : null });
  }

  /**
   * Apply a change from the settings page now, without restarting the app, and keep it: the hub's schedule
   * and auto-pause in its store, the node's settings in node.json, the rest in settings.json. A LAN change
   * restarts the embedded hub on the new address (its placements stop; nodes reconnect by themselves).
   */
  private async changeSettings(c: SettingsChange): Promise<void> {
    if (this.settings.mode === 'hub') {
      if (!this.hub && (c.schedule !== undefined || c.autoPause !== undefined)) throw new Error('the hub is not running: see the error in the tray');
      if (c.schedule !== undefined || c.autoPause !== undefined) {
        await this.hub!.availability.set({ ...(c.schedule !== undefined ? { schedule: c.schedule } : {}), ...(c.autoPause !== undefined ? { autoPause: c.autoPause } : {}) });
      }
      if (c.cpuBudgetMb !== undefined) this.hub?.setCpuBudgetMb(c.cpuBudgetMb);
    } else if (this.settings.mode === 'node') {
      if (!this.agent) throw new Error('the node is not running: see the error in the tray');
      const { lan: _lan, startAtLogin: _login, ...nodeChange } = c;
      if (Object.keys(nodeChange).length > 0) await this.agent.configure(nodeChange);
    } else if (Object.keys(c).some((k) => k !== 'startAtLogin')) {
      throw new Error('set relay up first (hub or node)');
    }
    if (c.cpuBudgetMb !== undefined) this.settings.cpuBudgetMb = c.cpuBudgetMb;
    if (c.startAtLogin !== undefined && c.startAtLogin !== this.settings.startAtLogin) {
      this.settings.startAtLogin = c.startAtLogin;
      this.opts.shell.setLoginItem(c.startAtLogin);
    }
    // A LAN change only when it changes reachability (a hand-set address that already matches stays as it is).
    const before = this.settings.hubListen;
    const relisten = this.settings.mode === 'hub' && c.lan !== undefined && c.lan !== beyondLoopback(before);
    if (relisten) this.settings.hubListen = c.lan ? '0.0.0.0' : '127.0.0.1';
    this.saveSettings();
    if (relisten) {
      const listen = this.settings.hubListen;
      this.opts.log.info({ listen }, 'the hub moves to a new address: restarting it in this process');
      this.keepPort = this.hub?.port ?? null;
      await this.stop();
      await this.launch();
      if (!this.hub) {
        // It could not start there (the port taken on that address?): back to where it ran, and say why.
        const why = this.lastError ?? 'the hub did not start';
        this.settings.hubListen = before;
        this.saveSettings();
        this.keepPort = null;
        await this.launch();
        throw new Error(`the hub could not listen on ${listen} (${why}); it runs on ${before} again`);
      }
      // A hub the network can reach answers /v1 only with a key: make the first one now and show it.
      if (this.hub && beyondLoopback(listen) && !this.hub.keys.any) this.setupKey = (await this.hub.keys.create('tray')).key;
    }
  }

  /** First run or "change mode": join the hub first (a bad token changes nothing), then switch. */
  private async setup(req: SetupRequest): Promise<void> {
    if (req.mode === 'node') {
      const hubUrl = req.hubUrl!.replace(/\/+$/, '');
      const name =
        req.name ??
        hostname()
          .replace(/[^A-Za-z0-9._-]/g, '-')
          .slice(0, 64);
      const { credential, hubCert } = await joinHub(hubUrl, req.token!, name);
      await this.stop();
      const prev = readSettings(this.nodeHome);
      writeSettings(this.nodeHome, {
        hub: hubUrl,
        name,
        credential,
        hubCert,
        paused: false,
        schedule: prev?.schedule ?? '',
        cpuBudgetMb: prev?.cpuBudgetMb ?? this.settings.cpuBudgetMb,
        cacheBudgetMb: prev?.cacheBudgetMb ?? 'auto',
        autoPause: prev?.autoPause ?? false,
      });
    } else {
      await this.stop();
      this.settings.hubListen = req.lan === false ? '127.0.0.1' : '0.0.0.0';
    }
    this.settings.mode = req.mode;
    this.saveSettings();
    await this.launch();
    // A hub the network can reach answers /v1 only with a key: make the first one now and show it.
    if (req.mode === 'hub' && this.hub && beyondLoopback(this.settings.hubListen) && !this.hub.keys.any) {
      this.setupKey = (await this.hub.keys.create('tray')).key;
      this.render();
    }
  }
}
