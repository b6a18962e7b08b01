import { UsageError } from './usage.js';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { nodeConfigFromEnv, nodeHomeDir } from '../core/config.js';
import { tokenHubUrl } from '../core/pairing/tokens.js';
import { ensureLlama, terminateAll } from '../core/llama/index.js';
import { backendOf, logInstall } from './llama.js';
import { lendsLine } from '../core/llama/doctor.js';
import { cacheBudgetFlag } from './cache.js';
import { api, apiFailure, hubUrl, intFlag, scheduleFlag } from './api.js';
import { llamaBuildProgress, showNodePushes, TerminalProgress } from './progress.js';
import { createLogger, logStrayRejections } from '../core/log.js';
import { NodeAgent } from '../core/node/agent.js';
import { readSettings, writeSettings, type NodeSettings } from '../core/node/link/settings.js';
import { joinHub } from '../core/node/link/hub-client.js';

/** `relay up` (run a node) and `relay pause|resume` (a node's, or with --hub the hub's own devices). */

export const nodeHome = (v: string | undefined): string => nodeHomeDir(v);

export async function cmdUp(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      hub: { type: 'string' },
      token: { type: 'string' },
      name: { type: 'string' },
      home: { type: 'string' },
      'cpu-budget-mb': { type: 'string' },
      'cache-budget-mb': { type: 'string' },
      schedule: { type: 'string' },
      'auto-pause': { type: 'boolean' },
      backend: { type: 'string' },
    },
  });
  // Every flag checked before anything is read or asked.
  const backend = backendOf(values.backend);
  const cpuBudgetMb = intFlag(values['cpu-budget-mb'], '--cpu-budget-mb');
  const cacheBudgetMb = cacheBudgetFlag(values['cache-budget-mb']);
  scheduleFlag(values.schedule);
  const home = nodeHome(values.home);
  const saved = readSettings(home);
  // A token from the dashboard's "Add a node" carries the hub's address: --hub may be left out.
  const hub = (values.hub ?? (values.token ? tokenHubUrl(values.token) : null) ?? saved?.hub)?.replace(/\/+$/, '');
  if (!hub) throw new UsageError('the first time, relay up needs --hub URL and --token T (later runs remember both)');
  const name =
    values.name ??
    saved?.name ??
    hostname()
      .replace(/[^A-Za-z0-9._-]/g, '-')
      .slice(0, 64);
  const same = saved && saved.hub === hub && saved.name === name;
  let credential = same ? saved.credential : '';
  let hubCert = same ? (saved.hubCert ?? null) : null;
  if (!credential) {
    if (!values.token) throw new Error(`this node has not joined ${hub} yet: pass --token (from \`relay nodes token\` on the hub)`);
    ({ credential, hubCert } = await joinHub(hub, values.token, name));
  }
  const settings: NodeSettings = {
    hub,
    name,
    credential,
    hubCert,
    paused: saved?.paused ?? false,
    // The hub owner's pause (its dashboard) outlives a restart too, as the tray keeps it: for that hub only.
    ...(same && saved.hubPaused !== undefined ? { hubPaused: saved.hubPaused } : {}),
    schedule: values.schedule ?? saved?.schedule ?? '',
    cpuBudgetMb: cpuBudgetMb ?? saved?.cpuBudgetMb ?? 0,
    cacheBudgetMb: cacheBudgetMb ?? saved?.cacheBudgetMb ?? 'auto',
    autoPause: values['auto-pause'] ?? saved?.autoPause ?? false,
  };
  writeSettings(home, settings);
  const log = createLogger({ name: `node:${name}` });
  logStrayRejections(log);
  const terminal = new TerminalProgress(process.stderr, (l) => log.info(l));
  const install = await ensureLlama({ backend, progress: llamaBuildProgress(terminal) });
  logInstall(log, install);
  // A machine with no GPU relay can use and no CPU budget joins and lends nothing: say so, with the flag.
  const lends = lendsLine([], settings.cpuBudgetMb);
  if (install.backend === 'cpu' && lends.nothing) {
    console.error(`relay: this machine lends ${lends.line}`);
    log.warn({ backend: install.backend, cpu_budget_mb: 0 }, 'this node lends nothing');
  }
  const agent = new NodeAgent(home, settings, { log, install, config: nodeConfigFromEnv() });
  if (terminal.tty) showNodePushes(terminal, agent);
  agent.on('connected', () => console.log(`relay node ${name} connected to ${hub}`));
  // Listening before start: a refusal can come at once (a node that must join again never dials).
  const ended = new Promise<number>((done) => {
    agent.once('fatal', (err: Error) => {
      console.error(`relay: ${err.message}`);
      done(2);
    });
    process.once('SIGINT', () => done(0));
    process.once('SIGTERM', () => done(0));
  });
  await agent.start();
  const code = await ended;
  await agent.stop();
  await terminateAll(5000);
  return code;
}

export async function cmdPause(paused: boolean, args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { home: { type: 'string' }, hub: { type: 'boolean' }, 'hub-url': { type: 'string' } } });
  if (values.hub) {
    // The hub's own devices: its placements stop within 30 s and requests go to nodes.
    const res = await api(hubUrl(values['hub-url']), '/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused }) });
    const j = (await res.json()) as { availability: string; reason: string | null; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`${paused ? 'paused' : 'resumed'}: the hub's devices are ${j.availability}${j.reason ? ` (${j.reason})` : ''}`);
    return 0;
  }
  const home = nodeHome(values.home);
  const p = join(home, 'agent.json');
  if (!existsSync(p)) throw new Error(`no running node in ${home} (start it with relay up)`);
  const { port, token } = JSON.parse(readFileSync(p, 'utf8')) as { port: number; token: string };
  let res: Response;
  try {
    res = await fetch(`http://127.0.0.1:${port}/${paused ? 'pause' : 'resume'}`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
  } catch {
    throw new Error(`the node in ${home} is not running (start it with relay up)`);
  }
  const j = (await res.json()) as { availability: string; reason: string | null };
  console.log(`${paused ? 'paused' : 'resumed'}: node is ${j.availability}${j.reason ? ` (${j.reason})` : ''}`);
  return res.ok ? 0 : 1;
}
