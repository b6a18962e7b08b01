import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { isRelayError } from '../../shared/errors.js';
import type { StatusDto } from '../../shared/status.js';
import { hubConfigFromEnv, processEnv, type HubConfig } from '../core/config.js';
import { packageVersion, startHub } from '../core/hub/index.js';
import { hubJoinToken } from '../core/pairing/tokens.js';
import { joinCommands, type JoinCommand } from '../core/pairing/join-commands.js';
import { packageName } from '../core/app-files.js';
import { ensureLlama, terminateAll } from '../core/llama/index.js';
import { backendOf, cmdDoctor, cmdLlamaBuild, logInstall } from './llama.js';
import { cmdCache } from './cache.js';
import { api, apiFailure, hubUrl, intFlag } from './api.js';
import { cmdModels } from './models.js';
import { statusLines } from './status.js';
import { cmdPause, cmdUp, nodeHome } from './node.js';
import { parseSchedule } from '../core/availability.js';
import { llamaBuildProgress, showHubPushes, TerminalProgress } from './progress.js';
import { createLogger, logStrayRejections } from '../core/log.js';

const USAGE = `relay — pool a household's GPUs for llama.cpp inference

Usage:
  relay hub [--port 7070] [--listen 127.0.0.1] [--home DIR] [--cpu-budget-mb N] [--keep-alive-ms MS]
            [--tls-cert FILE --tls-key FILE] [--backend auto|cpu|cuda|vulkan|metal]
            [--schedule "mon-fri 09:00-17:30"] [--auto-pause]   (when the hub's own devices are paused)
            [--allowed-hosts desktop.lan,…]   (names besides its own, its addresses and <hostname>.local)
            [--ollama-port 11434]   (the same API on Ollama's port too, for apps that only look there)
                         run the hub: OpenAI-compatible /v1, Anthropic's /v1/messages, the Ollama API at
                         /api/chat …, dashboard at /, admin API at /api
  relay models add FILE [--name NAME] [--required-vram-mb N] [--embedding | --reranker] [--mmproj FILE|none] [--hub URL]
                   [--ctx N] [--slots N] [--kv f16|q8_0|q4_0] [--flash-attn on|off|auto]
  relay models set NAME [--ctx N] [--slots N] [--kv …] [--flash-attn …] [--mmproj FILE|none] [--draft MODEL|none] [--draft-max N] [--draft-min N]   ("default": the pool's value)
                         a model's own context per slot, parallel slots, KV cache type, flash attention
  relay models ls [--hub URL]
  relay models import ollama|lmstudio|DIR [--hub URL] [--json] [--ctx N] [--slots N] [--kv …] [--flash-attn …]
                         register the GGUFs already on the hub machine (Ollama's store: OLLAMA_MODELS or
                         its default; LM Studio's models folder; any folder), under readable names
  relay models rm NAME [--hub URL]
                         manage the running hub's registry (it hashes and reads the GGUF header)
  relay status [--hub URL] [--json]
                         the pool at a glance: the hub, nodes, devices, placements, models, pushes, backoffs
  relay dashboard [--link [--read-only]] [--hub URL]
                         the dashboard's URL; --link: a one-time login link for a browser on another machine
  relay keys create NAME | ls | revoke NAME [--hub URL]
                         API keys for /v1 (a hub listening beyond loopback requires one); the key is printed once
  relay nodes token [--hub URL | --home HUB_DIR]
                         a join token for a new machine and the command to run there (Linux, Windows, npm);
                         the token is the last line. --home: minted offline from the hub's data dir
  relay nodes ls | revoke NAME [--hub URL]
  relay up [--hub URL] --token T [--name N] [--home DIR] [--cpu-budget-mb N] [--cache-budget-mb N|auto]
         [--schedule "mon-fri 09:00-17:30"] [--auto-pause] [--backend auto|cpu|cuda|vulkan|metal]
                         run a node: dial out to the hub and lend this machine's device
  relay cache ls | prune [--home NODE_DIR] [--json]
                         a node's weights cache: files, sizes, last use, budget / remove what no replica uses
  relay pause | resume [--home NODE_DIR]
                         stop sharing (the hub releases this machine's GPU within 30 s) / share again
  relay pause | resume --hub [--hub-url URL]
                         the same for the hub's own devices: its placements stop, requests go to nodes
  relay llama build [--backend cuda|vulkan|metal] [--windows]
                         build llama-server and ggml-rpc-server from the pinned llama.cpp source (cached
                         under ~/.cache/relay/llama.cpp/<tag>-shared/; a second call returns at once); with
                         --backend, also that GPU module, with your local toolkit (preferred to a prebuilt one);
                         --windows: cross-build the Windows x64 binaries with mingw-w64 (<tag>-win64/)
  relay doctor [--backend auto|cpu|cuda|vulkan|metal] [--home NODE_DIR]
                         what this machine has (NVIDIA driver, CUDA runtime, Vulkan), the backend relay uses
                         and why, the devices llama-server sees, what a node here lends, and whether
                         auto-pause can work here
  relay --version | --help

Environment (see README for all):
  RELAY_HOME             hub data dir (the JSON store); default the platform's user data dir
  RELAY_HUB_URL          hub for \`relay models\` (default http://127.0.0.1:7070)
  RELAY_KV_CACHE_TYPE    f16 | q8_0 | q4_0          RELAY_CONTEXT_SIZE, RELAY_REPLICA_CTX, RELAY_PARALLEL_SLOTS
  RELAY_FLASH_ATTN       on | off | auto            RELAY_API_KEY, RELAY_ADMIN_TOKEN
  RELAY_LLAMA_BACKEND    auto (default) | cpu | cuda | vulkan | metal: the GPU backend (--backend wins)
  RELAY_LLAMA_BIN_DIR    use your own llama.cpp build (a folder holding llama-server and ggml-rpc-server)
  RELAY_CACHE_DIR        cache root (default ~/.cache/relay)
  RELAY_QUEUE_MAX        requests that may wait per model (64; one more: 429 pool_busy), RELAY_QUEUE_TIMEOUT_MS
  RELAY_MAX_PLACEMENTS_PER_MODEL   placements one model may have at once (0 = as many as the devices hold)
`;

async function cmdHub(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: 'string' },
      listen: { type: 'string' },
      home: { type: 'string' },
      'cpu-budget-mb': { type: 'string' },
      'keep-alive-ms': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      backend: { type: 'string' },
      schedule: { type: 'string' },
      'auto-pause': { type: 'boolean' },
      'allowed-hosts': { type: 'string' },
      'ollama-port': { type: 'string' },
    },
  });
  if (values.schedule !== undefined) parseSchedule(values.schedule); // refuse a bad schedule before anything else
  const env = processEnv();
  const overrides: Partial<HubConfig> = {
    tlsCertPath: values['tls-cert'] ? resolve(values['tls-cert']) : undefined,
    tlsKeyPath: values['tls-key'] ? resolve(values['tls-key']) : undefined,
    port: intFlag(values.port, '--port'),
    host: values.listen,
    home: values.home ? resolve(values.home) : undefined,
    cpuBudgetMb: intFlag(values['cpu-budget-mb'], '--cpu-budget-mb'),
    keepAliveMs: intFlag(values['keep-alive-ms'], '--keep-alive-ms'),
    hubSchedule: values.schedule,
    hubAutoPause: values['auto-pause'],
    ollamaPort: intFlag(values['ollama-port'], '--ollama-port'),
  };
  const config = hubConfigFromEnv(env, overrides, values['allowed-hosts']);
  const log = createLogger({ name: 'hub' });
  logStrayRejections(log);
  const terminal = new TerminalProgress(process.stderr, (l) => log.info(l));
  const install = await ensureLlama({ backend: backendOf(values.backend), progress: llamaBuildProgress(terminal) });
  logInstall(log, install);
  const hub = await startHub(config, { log, install });
  if (terminal.tty) showHubPushes(terminal, () => hub.nodes.pushes.values());
  console.log(`relay hub ${packageVersion()} is serving`);
  console.log(`  /v1        ${hub.url}/v1`);
  if (hub.ollamaUrl) console.log(`  ollama     ${hub.ollamaUrl}  (the Ollama API; also at ${hub.url}/api)`);
  console.log(`  dashboard  ${hub.url}/`);
  console.log(`  store      ${hub.store.path}`);
  if (config.host === '0.0.0.0' || config.host === '::') console.log(`  listening on all interfaces (port ${hub.port})`);
  await new Promise<void>((done) => {
    const stop = (sig: string): void => {
      log.info({ signal: sig }, 'shutting down');
      void hub.close().then(done, done);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  await terminateAll(5000);
  return 0;
}

async function cmdNodes(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { home: { type: 'string' }, hub: { type: 'string' }, json: { type: 'boolean' } } });
  if (sub === 'token') {
    // From the running hub, as "Add a node…" makes it (the token carries the address nodes reach it at); with
    // --home, minted offline from the hub's data dir (the hub need not run; the commands then name --hub).
    let made: { token: string; commands: JoinCommand[]; expires_at?: string; note?: string | null };
    if (values.home) {
      const token = hubJoinToken(resolve(values.home));
      made = { token, commands: joinCommands(token, { version: packageVersion(), npmName: packageName() }, 'http://HUB-ADDRESS:7070') };
    } else {
      const res = await api(hubUrl(values.hub), '/api/nodes/token', { method: 'POST' });
      const j = (await res.json()) as Partial<typeof made> & { token: string; command?: string; error?: { code: string; message: string } };
      if (!res.ok) return apiFailure(j);
      // A hub of relay 0.1.0 answers one `command` (for a checkout) instead of one per way of installing.
      made = { ...j, commands: j.commands ?? [{ os: 'npm', where: 'With this repository checked out', command: j.command ?? '' }] };
    }
    console.log(`Join token (valid 24 h, usable once${made.expires_at ? `, until ${made.expires_at}` : ''}). On the new machine run the line for how relay is installed there:`);
    for (const c of made.commands) console.log(`  ${c.where}:\n    ${c.command}`);
    if (made.note) console.log(`Note: ${made.note}`);
    console.log(made.token);
    return 0;
  }
  const base = hubUrl(values.hub);
  if (sub === 'ls') {
    const res = await api(base, '/api/nodes');
    const j = (await res.json()) as {
      nodes?: { name: string; state: string; reason: string | null; devices: { id: string; free_mb: number; total_mb: number }[]; last_seen: string | null; replicas: unknown[] }[];
      error?: { code: string; message: string };
    };
    if (!res.ok || !j.nodes) return apiFailure(j);
    if (values.json) {
      console.log(JSON.stringify(j.nodes, null, 2));
      return 0;
    }
    if (j.nodes.length === 0) console.log('no nodes (relay nodes token, then relay up on another machine)');
    for (const n of j.nodes) {
      const devs = n.devices.map((d) => `${d.id} ${d.free_mb}/${d.total_mb} MB`).join(', ') || '-';
      console.log(`${n.name.padEnd(16)} ${n.state.padEnd(8)} ${devs}  replicas ${n.replicas.length}  last seen ${n.last_seen ?? 'never'}${n.reason ? `  (${n.reason})` : ''}`);
    }
    return 0;
  }
  if (sub === 'revoke') {
    const name = positionals[0];
    if (!name) throw new Error('usage: relay nodes revoke NAME');
    const res = await api(base, `/api/nodes/${encodeURIComponent(name)}/revoke`, { method: 'POST' });
    const j = (await res.json()) as { revoked?: string; error?: { code: string; message: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`revoked: ${j.revoked}`);
    return 0;
  }
  throw new Error('usage: relay nodes token|ls|revoke');
}

async function cmdDashboard(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { hub: { type: 'string' }, link: { type: 'boolean' }, 'read-only': { type: 'boolean' } } });
  const base = hubUrl(values.hub);
  if (!values.link) {
    console.log(`${base}/`);
    return 0;
  }
  const res = await api(base, '/api/dashboard/links', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ read_only: values['read-only'] === true }) });
  const j = (await res.json()) as { urls: string[]; path: string; expires_at: string; error?: { code?: string; message?: string } };
  if (!res.ok) return apiFailure(j);
  console.error(`A one-time ${values['read-only'] ? 'read-only ' : ''}dashboard login, valid until ${j.expires_at}; open it on the other machine (the address its network reaches this hub at):`);
  for (const u of j.urls) console.log(u);
  return 0;
}

async function cmdKeys(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { hub: { type: 'string' }, json: { type: 'boolean' } } });
  const base = hubUrl(values.hub);
  if (sub === 'create' && positionals[0]) {
    const res = await api(base, '/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: positionals[0] }) });
    const j = (await res.json()) as { name: string; key: string; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.error(`API key "${j.name}" (shown once; the hub keeps only its SHA-256). Use it as the bearer key for ${base}/v1:`);
    console.log(j.key);
    return 0;
  }
  if (sub === 'ls') {
    const res = await api(base, '/api/keys');
    const j = (await res.json()) as { keys: { name: string; prefix: string; created_at: string; last_used_at: string | null }[]; required: boolean; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    if (values.json) console.log(JSON.stringify(j, null, 2));
    else {
      console.log(`/v1 ${j.required ? 'requires' : 'does not require'} a key`);
      for (const k of j.keys) console.log(`${k.name.padEnd(24)} ${k.prefix}…  made ${k.created_at}  last used ${k.last_used_at ?? 'never'}`);
    }
    return 0;
  }
  if ((sub === 'revoke' || sub === 'rm') && positionals[0]) {
    const res = await api(base, `/api/keys/${encodeURIComponent(positionals[0])}`, { method: 'DELETE' });
    const j = (await res.json()) as { error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`revoked: ${positionals[0]}`);
    return 0;
  }
  console.error('usage: relay keys create NAME | ls | revoke NAME [--hub URL]');
  return 2;
}

async function cmdStatus(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { hub: { type: 'string' }, json: { type: 'boolean' } } });
  const res = await api(hubUrl(values.hub), '/status');
  const j = (await res.json()) as StatusDto & { error?: { code?: string; message?: string } };
  if (!res.ok) return apiFailure(j);
  if (values.json) console.log(JSON.stringify(j, null, 2));
  else for (const l of statusLines(j)) console.log(l);
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (cmd === undefined || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(USAGE);
    return cmd === undefined ? 1 : 0;
  }
  if (cmd === '--version' || cmd === '-v') {
    console.log(packageVersion());
    return 0;
  }
  if (cmd === 'hub') return cmdHub(sub === undefined ? rest : [sub, ...rest]);
  if (cmd === 'models') return cmdModels(sub, rest);
  if (cmd === 'nodes') return cmdNodes(sub, rest);
  if (cmd === 'keys') return cmdKeys(sub, rest);
  if (cmd === 'dashboard') return cmdDashboard(sub === undefined ? rest : [sub, ...rest]);
  if (cmd === 'up') return cmdUp(sub === undefined ? rest : [sub, ...rest]);
  if (cmd === 'pause' || cmd === 'resume') return cmdPause(cmd === 'pause', sub === undefined ? rest : [sub, ...rest]);
  if (cmd === 'llama' && sub === 'build') return cmdLlamaBuild(rest);
  if (cmd === 'cache') return cmdCache(sub, rest, nodeHome);
  if (cmd === 'status') return cmdStatus(sub === undefined ? rest : [sub, ...rest]);
  if (cmd === 'doctor') return cmdDoctor(sub === undefined ? rest : [sub, ...rest]);
  console.error(`relay: unknown command "${argv.join(' ')}"\n`);
  process.stderr.write(USAGE);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (isRelayError(err)) console.error(`relay: ${err.code}: ${err.message}`);
    else if (err instanceof Error && (err as NodeJS.ErrnoException).code === undefined) console.error(`relay: ${err.message}`);
    else console.error(`relay: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 1;
  },
);
