/**
 * A stand-in for the parts of Electron's API that src/main/electron/main.ts uses, for checking relay's
 * wiring (lock, tray, menu clicks, window, ipcMain, quit) where Electron's binary cannot be installed. It
 * checks relay's code, not Electron: every call is printed as a JSON line on stdout, and JSON lines on stdin
 * drive it ({click: label}, {ipc, payload, sender}, {secondInstance: true}, {quit: true}, {navigate: url},
 * {windowOpen: url}).
 */
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';

type Item = { label?: string; click?: () => void; type?: string; checked?: boolean; enabled?: boolean };
const say = (o: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
const handlers = new Map<string, (e: unknown, payload: unknown) => unknown>();
let menu: Item[] = [];

class App extends EventEmitter {
  readonly isPackaged = false;
  requestSingleInstanceLock(): boolean {
    const ok = process.env.STANDIN_LOCK !== 'taken';
    say({ lock: ok });
    return ok;
  }
  getPath(name: string): string {
    if (name !== 'userData') throw new Error(`stand-in: getPath(${name})`);
    return process.env.STANDIN_USERDATA!;
  }
  whenReady(): Promise<void> {
    return new Promise((r) => setImmediate(r));
  }
  setLoginItemSettings(o: unknown): void {
    say({ loginItem: o });
  }
  quit(): void {
    let prevented = false;
    this.emit('before-quit', { preventDefault: () => (prevented = true) });
    say({ beforeQuit: { prevented } });
    if (!prevented) {
      say({ quit: true });
      process.exit(0);
    }
  }
}
export const app = new App();

export const nativeImage = {
  createFromPath: (path: string) => ({ path, exists: existsSync(path) }),
};

export class Tray {
  constructor(image: unknown) {
    say({ tray: { image } });
  }
  setImage(image: unknown): void {
    say({ trayImage: image });
  }
  setContextMenu(m: Item[]): void {
    menu = m;
    say({ menu: m.map((i) => ({ label: i.label, type: i.type, checked: i.checked, enabled: i.enabled, clickable: typeof i.click === 'function' })) });
  }
  setToolTip(t: string): void {
    say({ toolTip: t });
  }
}

export const Menu = { buildFromTemplate: (t: Item[]) => t };

let navigate: ((e: { preventDefault(): void }, url: string) => void) | null = null;
let openHandler: ((d: { url: string }) => { action: string }) | null = null;

export const shell = { openExternal: async (url: string) => say({ openExternal: url }) };

export class BrowserWindow {
  readonly webContents = {
    send: (channel: string) => say({ send: channel }),
    on: (ev: string, fn: (e: { preventDefault(): void }, url: string) => void) => {
      if (ev === 'will-navigate') navigate = fn;
    },
    setWindowOpenHandler: (fn: (d: { url: string }) => { action: string }) => void (openHandler = fn),
  };
  constructor(opts: Record<string, unknown>) {
    say({ window: opts });
  }
  isDestroyed(): boolean {
    return false;
  }
  async loadFile(f: string): Promise<void> {
    say({ loadFile: f, exists: existsSync(f) });
  }
  async loadURL(u: string): Promise<void> {
    say({ loadURL: u });
  }
  show(): void {
    say({ show: true });
  }
}

export const ipcMain = {
  handle: (channel: string, fn: (e: unknown, payload: unknown) => unknown) => void handlers.set(channel, fn),
};

export const contextBridge = {};
export const ipcRenderer = {};

createInterface({ input: process.stdin }).on('line', (line) => {
  const cmd = JSON.parse(line) as { click?: string; ipc?: string; payload?: unknown; sender?: string; secondInstance?: boolean; quit?: boolean; navigate?: string; windowOpen?: string };
  if (cmd.click !== undefined) {
    const item = menu.find((i) => i.label === cmd.click);
    if (!item?.click) return say({ error: `no clickable menu item ${cmd.click}` });
    item.click();
  } else if (cmd.ipc !== undefined) {
    const h = handlers.get(cmd.ipc);
    if (!h) return say({ error: `no ipc handler ${cmd.ipc}` });
    void Promise.resolve(h({ senderFrame: { url: cmd.sender } }, cmd.payload)).then((r) => say({ ipcResult: r }));
  } else if (cmd.navigate !== undefined) {
    let prevented = false;
    navigate?.({ preventDefault: () => (prevented = true) }, cmd.navigate);
    say({ navigated: cmd.navigate, prevented, handled: navigate !== null });
  } else if (cmd.windowOpen !== undefined) {
    say({ windowOpen: cmd.windowOpen, action: openHandler?.({ url: cmd.windowOpen }).action ?? null });
  } else if (cmd.secondInstance) {
    app.emit('second-instance');
  } else if (cmd.quit) {
    app.quit();
  }
  return undefined;
});
say({ handlers: 'ready' });
