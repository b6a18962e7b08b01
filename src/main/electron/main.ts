/**
 * The tray app's Electron shell: one instance per user, a tray icon and menu, one window (setup page or
 * dashboard), IPC wiring. Everything else — settings, the embedded hub or node agent, state, tray actions,
 * IPC checks — is src/main/app/controller.ts, tested without Electron. This is the only folder that imports
 * electron (test/arch checks it).
 */
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { app, BrowserWindow, ipcMain, Menu, nativeImage, shell as electronShell, Tray, type MenuItemConstructorOptions } from 'electron';
import { IPC_CHANNELS, STATE_EVENT, type AppState } from '../../shared/ipc.js';
import { AppController, type AppShell } from '../app/controller.js';
import { externalAllowed } from '../app/navigation.js';
import { buildTrayMenu, trayIcon } from '../app/tray-menu.js';
import { createLogger, logStrayRejections } from '../core/log.js';

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const asset = (f: string): string => join(root, 'assets', f);
const pages = join(root, 'src', 'renderer');

if (!app.requestSingleInstanceLock()) {
  app.quit();
} else {
  let tray: Tray | null = null;
  let win: BrowserWindow | null = null;
  let controller: AppController;

  const shell: AppShell = {
    openWindow(target) {
      if (!win || win.isDestroyed()) {
        win = new BrowserWindow({
          width: 1100,
          height: 800,
          title: 'relay',
          icon: asset('icon.png'),
          webPreferences: { preload: join(root, 'dist', 'src', 'main', 'electron', 'preload.cjs'), contextIsolation: true, nodeIntegration: false, sandbox: true },
        });
        // The window (which holds the IPC bridge) shows the app's pages and the hub's dashboard, nothing else;
        // a link that opens a new window goes to the user's browser when it is http(s).
        win.webContents.on('will-navigate', (e, url) => {
          if (!controller.navigationAllowed(url)) e.preventDefault();
        });
        win.webContents.setWindowOpenHandler(({ url }) => {
          if (externalAllowed(url)) void electronShell.openExternal(url);
          return { action: 'deny' };
        });
      }
      if ('page' in target) void win.loadFile(join(pages, `${target.page}.html`));
      else void win.loadURL(target.url);
      win.show();
    },
    setLoginItem(openAtLogin) {
      app.setLoginItemSettings({ openAtLogin });
    },
    quit() {
      app.quit();
    },
    render(s: AppState) {
      if (tray) {
        tray.setImage(nativeImage.createFromPath(asset(`tray-${trayIcon(s)}.png`)));
        const template: MenuItemConstructorOptions[] = buildTrayMenu(s).map((i) => ({
          label: i.label,
          type: i.type ?? 'normal',
          checked: i.checked,
          enabled: i.enabled ?? true,
          click: i.action ? () => void controller.onTray(i.action!) : undefined,
        }));
        tray.setContextMenu(Menu.buildFromTemplate(template));
        tray.setToolTip(`relay — ${template[0]?.label ?? ''}`);
      }
      if (win && !win.isDestroyed()) win.webContents.send(STATE_EVENT, s);
    },
  };

  for (const channel of IPC_CHANNELS) {
    ipcMain.handle(channel, (e, payload: unknown) => controller.handleIpc(channel, payload, e.senderFrame?.url ?? ''));
  }

  app.on('second-instance', () => void controller.onTray('open-dashboard'));
  app.on('window-all-closed', () => undefined); // a tray app keeps running without windows
  let quitting = false;
  app.on('before-quit', (e) => {
    if (quitting || !controller?.running) return;
    // Stop the hub or the agent and their llama.cpp children first; a crash of this process is covered by
    // PDEATHSIG on every child (src/main/core/llama/supervisor.ts).
    e.preventDefault();
    quitting = true;
    void controller.stop().finally(() => app.quit());
  });

  void app.whenReady().then(async () => {
    const userData = app.getPath('userData');
    // A tray app has no terminal: its log (hub or agent, and llama.cpp's failures) is a file.
    const log = createLogger({ name: 'tray', file: join(userData, 'logs', 'relay.log') });
    logStrayRejections(log);
    controller = new AppController({
      userData,
      shell,
      log,
      pagesUrl: `${pathToFileURL(pages).href}/`,
      // A packaged app ships llama-server and ggml-rpc-server as extraResources (electron-builder.yml).
      llamaBinDir: app.isPackaged ? join(process.resourcesPath, 'llama') : undefined,
    });
    tray = new Tray(nativeImage.createFromPath(asset('tray-setup.png')));
    setInterval(() => controller.render(), 5000).unref();
    await controller.start();
  });
}
