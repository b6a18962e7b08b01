import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { signalIfRunning } from './proc.js';
import type { HubProcess } from './hub.js';

const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

/** A real `relay up` process with its own data dir, joined to `hub` with a fresh token. */
export interface NodeProcess {
  readonly name: string;
  readonly home: string;
  readonly proc: ChildProcess;
  readonly logs: string[];
  readonly exited: Promise<number | null>;
  stop(): Promise<void>;
  kill9(): Promise<void>;
  local(path: string, method?: string): Promise<Record<string, unknown>>;
}

export function mintToken(hub: HubProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [relayBin, 'nodes', 'token', '--home', hub.home], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString()));
    p.on('exit', (code) => (code === 0 ? resolve(out.trim().split('\n').pop()!) : reject(new Error(`nodes token exited ${code}`))));
  });
}

export async function startNode(
  hub: HubProcess | { url: string; home: string },
  opts: { name: string; cpuBudgetMb?: number; home?: string; env?: Record<string, string>; args?: string[]; token?: string | null; hubFromToken?: boolean },
): Promise<NodeProcess> {
  const home = opts.home ?? mkdtempSync(join(tmpdir(), `relay-node-${opts.name}-`));
  const token = opts.token === undefined ? await mintToken(hub as HubProcess) : opts.token;
  // hubFromToken: no --hub, as a user pasting the dashboard's "Add a node" token would run it.
  const args = [
    relayBin,
    'up',
    ...(opts.hubFromToken ? [] : ['--hub', hub.url]),
    '--name',
    opts.name,
    '--home',
    home,
    ...(token ? ['--token', token] : []),
    ...(opts.cpuBudgetMb !== undefined ? ['--cpu-budget-mb', String(opts.cpuBudgetMb)] : []),
    ...(opts.args ?? []),
  ];
  const proc = spawn(process.execPath, args, { env: { ...process.env, RELAY_LOG_LEVEL: 'info', RELAY_HEARTBEAT_MS: '500', ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  createInterface({ input: proc.stderr }).on('line', (l) => {
    logs.push(l);
    if (logs.length > 1000) logs.shift();
  });
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: proc.stdout }).on('line', (l) => {
      if (/connected to/.test(l)) resolve();
    });
    void exited.then((code) => reject(new Error(`relay up exited with ${code} before connecting:\n${logs.join('\n')}`)));
  });
  return {
    name: opts.name,
    home,
    proc,
    logs,
    exited,
    async stop() {
      signalIfRunning(proc, 'SIGTERM');
      await exited;
    },
    async kill9() {
      proc.kill('SIGKILL');
      await exited;
    },
    async local(path: string, method = 'GET') {
      const { port, token } = JSON.parse(readFileSync(join(home, 'agent.json'), 'utf8')) as { port: number; token: string };
      const res = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
      return (await res.json()) as Record<string, unknown>;
    },
  };
}

/** Every TCP socket `pid` listens on, as [address hex, port] from /proc (IPv4 and IPv6). */
export function listeningSockets(pid: number): { addr: string; port: number }[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      /* closed meanwhile */
    }
  }
  const out: { addr: string; port: number }[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const rows = readFileSync(`/proc/${pid}/net/${table}`, 'utf8').trim().split('\n').slice(1);
    for (const row of rows) {
      const f = row.trim().split(/\s+/);
      const [addr, port] = f[1]!.split(':');
      if (f[3] === '0A' && inodes.has(f[9]!)) out.push({ addr: addr!, port: parseInt(port!, 16) });
    }
  }
  return out;
}
