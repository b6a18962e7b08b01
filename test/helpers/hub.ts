import type { StatusDto } from '../../src/shared/status.js';
import type { ModelView } from '../../src/main/core/hub/observe/model-view.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { signalIfRunning, until } from './proc.js';

/** A real `relay hub` process on 127.0.0.1 with its own data dir, as a household would run it. */
export interface HubProcess {
  readonly url: string;
  /** The Ollama port's URL when the hub was started with --ollama-port, else null. */
  readonly ollamaUrl: string | null;
  readonly home: string;
  readonly proc: ChildProcess;
  readonly logs: string[];
  stop(): Promise<void>;
  kill9(): Promise<void>;
  api<T = Record<string, unknown>>(path: string, init?: RequestInit): Promise<{ status: number; body: T }>;
  status(): Promise<HubStatus>;
}

/** /status as the hub sends it (src/shared/status.ts). */
export type HubStatus = StatusDto;

const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

export async function startHub(opts: { env?: Record<string, string>; args?: string[]; home?: string } = {}): Promise<HubProcess> {
  const home = opts.home ?? mkdtempSync(join(tmpdir(), 'relay-hub-'));
  const proc = spawn(process.execPath, [relayBin, 'hub', '--port', '0', '--home', home, ...(opts.args ?? [])], {
    env: { ...process.env, RELAY_LOG_LEVEL: 'info', ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  createInterface({ input: proc.stderr }).on('line', (l) => {
    logs.push(l);
    if (logs.length > 500) logs.shift();
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let ollamaUrl: string | null = null;
  const url = await new Promise<string>((resolve, reject) => {
    let v1 = '';
    // The banner: /v1, the Ollama port when asked for, the dashboard, the store (its last line).
    createInterface({ input: proc.stdout }).on('line', (l) => {
      const m = /\/v1\s+(https?:\/\/\S+)\/v1$/.exec(l);
      if (m) v1 = m[1]!;
      const o = /^\s+ollama\s+(https?:\/\/\S+)/.exec(l);
      if (o) ollamaUrl = o[1]!;
      if (/^\s+store\s/.test(l) && v1) resolve(v1);
    });
    void exited.then(() => reject(new Error(`relay hub exited before serving:\n${logs.join('\n')}`)));
  });
  const api = async <T>(path: string, init: RequestInit = {}) => {
    const res = await fetch(`${url}${path}`, init);
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: body as T };
  };
  return {
    url,
    ollamaUrl,
    home,
    proc,
    logs,
    api,
    async status() {
      return (await api<HubStatus>('/status')).body;
    },
    async stop() {
      signalIfRunning(proc, 'SIGTERM');
      await exited;
    },
    async kill9() {
      proc.kill('SIGKILL');
      await exited;
    },
  };
}

/** Registers a GGUF with the hub at `hub.url` (a `relay hub` process or a hub embedded in the tray app). */
export async function addModel(hub: { url: string }, body: { path: string; name?: string; required_vram_mb?: number; embedding?: boolean; reranker?: boolean; parallel_slots?: number }) {
  const res = await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = (await res.json()) as { model?: ModelView; error?: { code: string; message: string } };
  if (res.status !== 201 && res.status !== 200) throw new Error(`add model failed: ${res.status} ${JSON.stringify(j)}`);
  return j.model!;
}

/** Pause the hub's own devices and wait until no replica is left on the hub: requests then go to the nodes. */
export async function pauseHubDevices(hub: HubProcess): Promise<void> {
  const r = await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
  if (r.status !== 200) throw new Error(`pausing the hub failed: ${r.status} ${JSON.stringify(r.body)}`);
  await until(
    async () => (await hub.status()).replicas.filter((x) => x.node === null).length,
    (n) => n === 0,
  );
}
