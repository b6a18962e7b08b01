import { readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AppState } from '../../src/shared/ipc.js';
import type { AppPage, AppShell } from '../../src/main/app/controller.js';
import { createLogger } from '../../src/main/core/log.js';

/** What the tray app's tests share: the pages' URL, a recording shell, a quiet logger, small probes. */
export const TRAY_ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
export const repo = new URL('../../../', import.meta.url).pathname;
export const pagesUrl = `${pathToFileURL(join(repo, 'src', 'renderer')).href}/`;
export const relayBin = join(repo, 'bin', 'relay.js');
export const artifacts = process.env.RELAY_TEST_ARTIFACTS ?? join(homedir(), '.cache', 'relay', 'artifacts');
export const quiet = () => createLogger({ name: 'tray-test', level: process.env.RELAY_LOG_LEVEL ?? 'warn', pretty: false });

export class RecordingShell implements AppShell {
  windows: ({ page: AppPage } | { url: string })[] = [];
  loginItem: boolean | null = null;
  quits = 0;
  last: AppState | null = null;
  openWindow(t: { page: AppPage } | { url: string }) {
    this.windows.push(t);
  }
  setLoginItem(open: boolean) {
    this.loginItem = open;
  }
  quit() {
    this.quits++;
  }
  render(s: AppState) {
    this.last = s;
  }
}

/** ggml-rpc-server processes that are children of this test process (the embedded agent's). */
export function rpcServerPids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number)
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === process.pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('ggml-rpc-server');
      } catch {
        return false;
      }
    });
}

export const completion = (url: string, model: string, key?: string) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }),
  });
