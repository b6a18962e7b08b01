// The only bridge between the window and the main process: exactly the calls of src/shared/ipc.ts.
// contextIsolation is on and nodeIntegration off; this file runs sandboxed, so it is CommonJS.
import { contextBridge, ipcRenderer } from 'electron';
import type { AppState, IpcChannel, IpcContract, IpcResult, RelayBridge } from '../../shared/ipc.js';

// The main process validates every payload and answers an IpcResult (controller.ts); the types say so here.
const call = <C extends IpcChannel>(channel: C, payload: IpcContract[C][0] | null = null): Promise<IpcResult<IpcContract[C][1]>> => ipcRenderer.invoke(channel, payload);

const bridge: RelayBridge = {
  getState: () => call('relay:get-state'),
  setup: (req) => call('relay:setup', req),
  setPaused: (paused) => call('relay:set-paused', paused),
  openDashboard: () => call('relay:open-dashboard'),
  getSettings: () => call('relay:get-settings'),
  saveSettings: (change) => call('relay:save-settings', change),
  onState: (fn) => {
    ipcRenderer.on('relay:state', (_e, state: AppState) => fn(state));
  },
};
contextBridge.exposeInMainWorld('relay', bridge);
