// The only bridge between the window and the main process: exactly the calls of src/shared/ipc.ts.
// contextIsolation is on and nodeIntegration off; this file runs sandboxed, so it is CommonJS.
import { contextBridge, ipcRenderer } from 'electron';

const call = (channel: string, payload: unknown = null): Promise<unknown> => ipcRenderer.invoke(channel, payload);

contextBridge.exposeInMainWorld('relay', {
  getState: () => call('relay:get-state'),
  setup: (req: unknown) => call('relay:setup', req),
  setPaused: (paused: boolean) => call('relay:set-paused', paused),
  openDashboard: () => call('relay:open-dashboard'),
  getSettings: () => call('relay:get-settings'),
  saveSettings: (change: unknown) => call('relay:save-settings', change),
  onState: (fn: (state: unknown) => void) => {
    ipcRenderer.on('relay:state', (_e, state: unknown) => fn(state));
  },
});
