import { readFileSync } from 'node:fs';
import { homedir as osHomedir } from 'node:os';
import { join, posix, resolve, win32 } from 'node:path';
import { ErrorCode, RelayError } from '../../shared/errors.js';
import { KV_CACHE_TYPES, type FlashAttn, type KvCacheType } from './llama/argv.js';

/**
 * The process's environment, read here and nowhere else in src (test/arch holds that). relay's own variables
 * are parsed in this file (HubConfig, NodeConfig, CliConfig, the log level) or by a `…FromEnv`-style function
 * that takes the environment as an argument (llama/: the binaries' folder, backend and cache dir; import's
 * OLLAMA_MODELS); modules that start children pass it on, because compilers, CUDA and Vulkan read their own.
 */
export function processEnv(): NodeJS.ProcessEnv {
  return process.env;
}

/** pino's level: RELAY_LOG_LEVEL, default info. */
export function logLevelFromEnv(env: NodeJS.ProcessEnv = processEnv()): string {
  return env.RELAY_LOG_LEVEL || 'info';
}

/**
 * Every setting the hub reads, in one place: environment variables of the spec, then CLI flags on top.
 * Units are in the names. `verifyConfig` rejects nonsense before anything binds or spawns.
 */
export interface HubConfig {
  /** Data dir: the JSON store lives here. RELAY_HOME, `--home`. */
  readonly home: string;
  readonly host: string;
  readonly port: number;
  /** A second port serving the same app for apps that only find Ollama at its port (11434); null: none. RELAY_OLLAMA_PORT, `--ollama-port`. */
  readonly ollamaPort: number | null;
  /** Context per slot for replicas: RELAY_CONTEXT_SIZE. */
  readonly contextSize: number;
  /** When > 0, replicas use min(replicaCtx, contextSize): RELAY_REPLICA_CTX. */
  readonly replicaCtx: number;
  /** RELAY_PARALLEL_SLOTS. */
  readonly parallelSlots: number;
  /** RELAY_KV_CACHE_TYPE: f16 (llama.cpp's default), q8_0 or q4_0. */
  readonly kvCacheType: KvCacheType;
  /** RELAY_FLASH_ATTN; unset = forced on for a quantized cache, llama.cpp's auto otherwise. */
  readonly flashAttn: FlashAttn | undefined;
  /** Opt-in capacity for a machine without a GPU (`--cpu-budget-mb`, RELAY_CPU_BUDGET_MB); 0 = none. */
  readonly cpuBudgetMb: number;
  /** An idle replica stops after this long (`--keep-alive-ms`, RELAY_KEEP_ALIVE_MS). */
  readonly keepAliveMs: number;
  /** Disk for the slots of idle host replicas, kept for their next start (RELAY_SLOT_KEEP_MB); 0 = none kept. */
  readonly slotKeepMb: number;
  /** When set, /v1 requires `Authorization: Bearer <key>` (RELAY_API_KEY). */
  readonly apiKey: string | undefined;
  /** When set, the admin API also answers non-loopback clients that present it (RELAY_ADMIN_TOKEN). */
  readonly adminToken: string | undefined;
  /** Largest accepted request body for /v1 and /api (RELAY_MAX_BODY_BYTES). */
  readonly maxBodyBytes: number;
  /** Requests that may wait for a slot of one model (RELAY_QUEUE_MAX); one more answers 429 pool_busy. */
  readonly queueMax: number;
  /** How long a request waits for a slot before 503 pool_busy (RELAY_QUEUE_TIMEOUT_MS). */
  readonly queueTimeoutMs: number;
  /** Placements one model may have at once (RELAY_MAX_PLACEMENTS_PER_MODEL); 0 = no bound but the devices. */
  readonly maxPlacementsPerModel: number;
  /** Weekly windows in which the hub's own devices are paused (`relay hub --schedule`, RELAY_HUB_SCHEDULE); unset = as stored. */
  readonly hubSchedule?: string;
  /** Opt-in auto-pause of the hub's own devices (`relay hub --auto-pause`, RELAY_HUB_AUTO_PAUSE=1); unset = as stored. */
  readonly hubAutoPause?: boolean;
  /**
   * More names this hub answers to, besides loopback, its addresses and its machine name (`desktop`, `desktop.local`):
   * RELAY_ALLOWED_HOSTS and `relay hub --allowed-hosts`, comma-separated (e.g. `desktop.lan,desktop.fritz.box`).
   */
  readonly allowedHosts: readonly string[];
  /** Browser origins allowed on the client routes (RELAY_ORIGINS, comma-separated, `*` wildcards; hub/http/origins.ts). */
  readonly allowedOrigins: readonly string[];
  /** Loopback clients are admins without a login (RELAY_LOOPBACK_ADMIN=0: they need one too, for a machine shared with other users). */
  readonly loopbackAdmin: boolean;
  /**
   * RELAY_FETCH_IMAGES=1: the hub fetches images clients give as http(s) links and sends them on inline. Off by
   * default: a hub that fetches any address a client names reaches the home network's devices for it (SSRF).
   */
  readonly fetchImages: boolean;
  /** Route a conversation to the placement whose KV cache holds its prompt's prefix (RELAY_PREFIX_ROUTING=0: least loaded only). */
  readonly prefixRouting: boolean;
  /** How shards are split (RELAY_SHARD_PLAN): `speed` (the default: predicted time per token) or `memory` (free memory, the older rule). */
  readonly shardPlan: 'speed' | 'memory';
  /** A request's headers and body must arrive within this (RELAY_REQUEST_TIMEOUT_MS); the response is not limited. */
  readonly requestTimeoutMs: number;
  /** Open connections the hub accepts at once, nodes included (RELAY_MAX_CONNECTIONS). */
  readonly maxConnections: number;
  /**
   * A load's deadline is this base plus `loadMsPerGib` per GiB of the model's weights (scheduler/decide/deadline.ts), for
   * every placement kind, on the hub and on nodes alike (RELAY_LOAD_TIMEOUT_MS, RELAY_LOAD_MS_PER_GIB): a 40 GB
   * model from a spinning disk is given the time it needs, a 500 MB one is not waited on for half an hour.
   */
  readonly loadBaseMs: number;
  readonly loadMsPerGib: number;
  /** CPU threads per llama-server (RELAY_THREADS); undefined = llama.cpp's choice. */
  readonly threads: number | undefined;
  /** Cap on weight-push bandwidth per push in MiB per second (RELAY_PUSH_MAX_MBPS, named before this rule); 0 = unlimited. */
  /** Where `relay models pull` stores files (RELAY_DOWNLOAD_DIR); unset: `<home>/models`. */
  readonly downloadDir?: string | undefined;
  /** The Hugging Face endpoint pulls use (HF_ENDPOINT, for mirrors), no trailing slash. */
  readonly hfEndpoint: string;
  /** A Hugging Face token for gated and private repositories (HF_TOKEN, else huggingface_hub's token file); never logged. */
  readonly hfToken?: string | undefined;
  readonly pushMaxMibPerSec: number;
  /** A weight push that moves no byte for this long while the node answers pings fails (RELAY_PUSH_STALL_MS). */
  readonly pushStallMs: number;
  /**
   * A stalled request's placement is checked for a stopped or frozen llama-server / rpc-server and failed if so
   * (RELAY_HANG_CHECK=0 turns that off — while you debug a llama-server, say; nodes are still pinged).
   */
  readonly hangCheck: boolean;
  /** PEM files: with both set the hub serves HTTPS, and nodes dial wss:// (RELAY_TLS_CERT, RELAY_TLS_KEY). */
  readonly tlsCertPath: string | undefined;
  readonly tlsKeyPath: string | undefined;
  /**
   * Shard stages on a node that holds the GGUF fill ggml-rpc-server's cache from that copy (RELAY_RPC_CACHE_FILL=0
   * turns it off, for measuring). Read at each shard start, so a benchmark may change it on a running hub.
   */
  readonly rpcCacheFill: boolean;
  /** bench/shard's hub-first experiment: the output layer on the remote stage (RELAY_EXPERIMENT_OUTPUT_REMOTE=1); never for use. */
  readonly experimentOutputRemote: boolean;
}

/** What `relay up` and the tray's node mode read from the environment. */
export interface NodeConfig {
  /** CPU threads per llama-server and per ggml-rpc-server (RELAY_THREADS); undefined = llama.cpp's choice. */
  readonly threads: number | undefined;
  /** How long the node keeps its work after losing the hub before it stops everything (RELAY_NODE_ORPHAN_MS). */
  readonly orphanMs: number;
  /** Heartbeat period (RELAY_HEARTBEAT_MS): availability, devices and replicas to the hub. */
  readonly heartbeatMs: number;
}

export function nodeConfigFromEnv(env: NodeJS.ProcessEnv = processEnv()): NodeConfig {
  return {
    threads: env.RELAY_THREADS ? int(env, 'RELAY_THREADS', 0) : undefined,
    orphanMs: int(env, 'RELAY_NODE_ORPHAN_MS', 60_000),
    heartbeatMs: int(env, 'RELAY_HEARTBEAT_MS', 5000),
  };
}

/** What the `relay` command's clients (models, nodes, keys, status, pause) read from the environment. */
export interface CliConfig {
  /** The hub the admin commands talk to when --hub is not given (RELAY_HUB_URL). */
  readonly hubUrl: string;
  /** Sent as the bearer token to the admin API (RELAY_ADMIN_TOKEN), for a hub on another machine. */
  readonly adminToken: string | undefined;
  /** A node's data dir when --home is not given (RELAY_NODE_HOME). */
  readonly nodeHome: string | undefined;
}

export function cliConfigFromEnv(env: NodeJS.ProcessEnv = processEnv()): CliConfig {
  return {
    hubUrl: env.RELAY_HUB_URL || 'http://127.0.0.1:7070',
    adminToken: env.RELAY_ADMIN_TOKEN || undefined,
    nodeHome: env.RELAY_NODE_HOME || undefined,
  };
}

/** A node's data dir: `--home` (resolved), else RELAY_NODE_HOME, else `<default home>/node`. */
export function nodeHomeDir(flag: string | undefined, env: NodeJS.ProcessEnv = processEnv()): string {
  return flag ? resolve(flag) : (cliConfigFromEnv(env).nodeHome ?? join(defaultHome(env), 'node'));
}

export function defaultHome(env: NodeJS.ProcessEnv = processEnv()): string {
  return defaultHomeFor(process.platform, env);
}

/**
 * The data dir for `platform`. Windows: `%APPDATA%\relay`, the folder Electron gives the tray app (its
 * userData), so `relay up`/`relay pause` and the app share one node home; a household PC has no roaming
 * profile to copy a cache of gigabytes between machines (`--home` or RELAY_HOME moves it).
 */
export function defaultHomeFor(platform: NodeJS.Platform, env: NodeJS.ProcessEnv): string {
  if (env.RELAY_HOME) return env.RELAY_HOME;
  if (platform === 'win32') return win32.join(env.APPDATA || win32.join(env.USERPROFILE || osHomedir(), 'AppData', 'Roaming'), 'relay');
  const home = env.HOME ?? osHomedir();
  if (platform === 'darwin') return posix.join(home, 'Library', 'Application Support', 'relay');
  return posix.join(env.XDG_DATA_HOME || posix.join(home, '.local', 'share'), 'relay');
}

export const HUB_DEFAULTS = {
  host: '127.0.0.1',
  port: 7070,
  contextSize: 4096,
  replicaCtx: 0,
  parallelSlots: 2,
  kvCacheType: 'f16' as KvCacheType,
  cpuBudgetMb: 0,
  keepAliveMs: 10 * 60_000,
  slotKeepMb: 4096,
  maxBodyBytes: 32 * 1024 * 1024, // a few photos, base64 (a phone photo is 3–5 MB, a third more as base64)
  // 2 minutes, plus 45 s a GiB (about 23 MB/s: a USB disk or a NAS over Wi-Fi): 5 min for 4 GB, 32 min for 40 GB.
  loadBaseMs: 2 * 60_000,
  loadMsPerGib: 45_000,
  queueMax: 64,
  requestTimeoutMs: 60_000,
  maxConnections: 1024,
  // How long a request waits for a slot of a ready placement; while a placement of its model is still starting
  // (pushed, filled, loaded: each with its own deadline or stall check) it waits for that instead.
  queueTimeoutMs: 10 * 60_000,
  maxPlacementsPerModel: 0,
} as const;

function int(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `${name}=${raw} is not an integer`);
  return n;
}

/** huggingface_hub's order: HF_TOKEN, then the file `huggingface-cli login` writes (HF_TOKEN_PATH, $HF_HOME/token). */
function hfToken(env: NodeJS.ProcessEnv): string | undefined {
  if (env.HF_TOKEN) return env.HF_TOKEN.trim() || undefined;
  const path = env.HF_TOKEN_PATH || join(env.HF_HOME || join(env.HOME || osHomedir(), '.cache', 'huggingface'), 'token');
  try {
    return readFileSync(path, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** `allowedHostsFlag`: `relay hub --allowed-hosts`, added to RELAY_ALLOWED_HOSTS. */
export function hubConfigFromEnv(env: NodeJS.ProcessEnv = processEnv(), overrides: Partial<HubConfig> = {}, allowedHostsFlag = ''): HubConfig {
  const kv = (env.RELAY_KV_CACHE_TYPE ?? HUB_DEFAULTS.kvCacheType) as KvCacheType;
  const fa = env.RELAY_FLASH_ATTN as FlashAttn | undefined;
  const cfg: HubConfig = {
    home: defaultHome(env),
    host: HUB_DEFAULTS.host,
    port: int(env, 'RELAY_PORT', HUB_DEFAULTS.port),
    ollamaPort: env.RELAY_OLLAMA_PORT ? int(env, 'RELAY_OLLAMA_PORT', 0) : null,
    contextSize: int(env, 'RELAY_CONTEXT_SIZE', HUB_DEFAULTS.contextSize),
    replicaCtx: int(env, 'RELAY_REPLICA_CTX', HUB_DEFAULTS.replicaCtx),
    parallelSlots: int(env, 'RELAY_PARALLEL_SLOTS', HUB_DEFAULTS.parallelSlots),
    kvCacheType: kv,
    flashAttn: fa === undefined || fa === ('' as FlashAttn) ? undefined : fa,
    cpuBudgetMb: int(env, 'RELAY_CPU_BUDGET_MB', HUB_DEFAULTS.cpuBudgetMb),
    keepAliveMs: int(env, 'RELAY_KEEP_ALIVE_MS', HUB_DEFAULTS.keepAliveMs),
    slotKeepMb: int(env, 'RELAY_SLOT_KEEP_MB', HUB_DEFAULTS.slotKeepMb),
    apiKey: env.RELAY_API_KEY || undefined,
    adminToken: env.RELAY_ADMIN_TOKEN || undefined,
    maxBodyBytes: int(env, 'RELAY_MAX_BODY_BYTES', HUB_DEFAULTS.maxBodyBytes),
    loadBaseMs: int(env, 'RELAY_LOAD_TIMEOUT_MS', HUB_DEFAULTS.loadBaseMs),
    loadMsPerGib: int(env, 'RELAY_LOAD_MS_PER_GIB', HUB_DEFAULTS.loadMsPerGib),
    queueMax: int(env, 'RELAY_QUEUE_MAX', HUB_DEFAULTS.queueMax),
    requestTimeoutMs: int(env, 'RELAY_REQUEST_TIMEOUT_MS', HUB_DEFAULTS.requestTimeoutMs),
    maxConnections: int(env, 'RELAY_MAX_CONNECTIONS', HUB_DEFAULTS.maxConnections),
    queueTimeoutMs: int(env, 'RELAY_QUEUE_TIMEOUT_MS', HUB_DEFAULTS.queueTimeoutMs),
    maxPlacementsPerModel: int(env, 'RELAY_MAX_PLACEMENTS_PER_MODEL', HUB_DEFAULTS.maxPlacementsPerModel),
    threads: env.RELAY_THREADS ? int(env, 'RELAY_THREADS', 0) : undefined,
    pushMaxMibPerSec: int(env, 'RELAY_PUSH_MAX_MBPS', 0),
    // Relative to where the hub was started (the registry keeps absolute paths only).
    downloadDir: env.RELAY_DOWNLOAD_DIR ? resolve(env.RELAY_DOWNLOAD_DIR) : undefined,
    hfEndpoint: (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, ''),
    hfToken: hfToken(env),
    pushStallMs: int(env, 'RELAY_PUSH_STALL_MS', 30_000),
    hangCheck: env.RELAY_HANG_CHECK !== '0',
    loopbackAdmin: env.RELAY_LOOPBACK_ADMIN !== '0',
    fetchImages: env.RELAY_FETCH_IMAGES === '1',
    prefixRouting: env.RELAY_PREFIX_ROUTING !== '0',
    shardPlan: (env.RELAY_SHARD_PLAN || 'speed') as HubConfig['shardPlan'],
    allowedHosts: `${env.RELAY_ALLOWED_HOSTS ?? ''},${allowedHostsFlag}`
      .split(',')
      .map((h) => h.trim())
      .filter(Boolean),
    allowedOrigins: (env.RELAY_ORIGINS ?? '')
      .split(',')
      .map((o) => o.trim())
      .filter(Boolean),
    hubSchedule: env.RELAY_HUB_SCHEDULE,
    hubAutoPause: env.RELAY_HUB_AUTO_PAUSE === undefined || env.RELAY_HUB_AUTO_PAUSE === '' ? undefined : env.RELAY_HUB_AUTO_PAUSE === '1',
    tlsCertPath: env.RELAY_TLS_CERT || undefined,
    tlsKeyPath: env.RELAY_TLS_KEY || undefined,
    rpcCacheFill: env.RELAY_RPC_CACHE_FILL !== '0',
    experimentOutputRemote: env.RELAY_EXPERIMENT_OUTPUT_REMOTE === '1',
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  };
  verifyConfig(cfg);
  return cfg;
}

export function verifyConfig(c: HubConfig): void {
  const bad = (msg: string): never => {
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, msg);
  };
  if (!KV_CACHE_TYPES.includes(c.kvCacheType)) bad(`RELAY_KV_CACHE_TYPE must be one of ${KV_CACHE_TYPES.join(', ')}, got "${c.kvCacheType}"`);
  if (c.flashAttn !== undefined && !['on', 'off', 'auto'].includes(c.flashAttn)) bad(`RELAY_FLASH_ATTN must be on, off or auto, got "${c.flashAttn}"`);
  if (c.contextSize < 64) bad(`RELAY_CONTEXT_SIZE must be at least 64, got ${c.contextSize}`);
  if (c.replicaCtx < 0) bad(`RELAY_REPLICA_CTX must be >= 0, got ${c.replicaCtx}`);
  if (c.parallelSlots < 1 || c.parallelSlots > 64) bad(`RELAY_PARALLEL_SLOTS must be 1..64, got ${c.parallelSlots}`);
  if (c.cpuBudgetMb < 0) bad(`--cpu-budget-mb must be >= 0, got ${c.cpuBudgetMb}`);
  if (c.port < 0 || c.port > 65535) bad(`port ${c.port} is out of range`);
  if (c.ollamaPort !== null && (c.ollamaPort < 0 || c.ollamaPort > 65535)) bad(`the Ollama port ${c.ollamaPort} is out of range`);
  if (c.ollamaPort !== null && c.ollamaPort !== 0 && c.ollamaPort === c.port) bad(`the Ollama port must differ from the hub's port (${c.port})`);
  if (c.keepAliveMs < 0) bad(`keep-alive must be >= 0 ms, got ${c.keepAliveMs}`);
  if (c.slotKeepMb < 0) bad(`RELAY_SLOT_KEEP_MB must be >= 0, got ${c.slotKeepMb}`);
  if (!/^https?:\/\/[^/]+/.test(c.hfEndpoint)) bad(`HF_ENDPOINT must be an http(s) URL, got ${c.hfEndpoint}`);
  if (Boolean(c.tlsCertPath) !== Boolean(c.tlsKeyPath)) bad('TLS needs both a certificate and a key (--tls-cert and --tls-key)');
  if (c.requestTimeoutMs < 1000) bad(`RELAY_REQUEST_TIMEOUT_MS must be at least 1000, got ${c.requestTimeoutMs}`);
  if (c.maxConnections < 8) bad(`RELAY_MAX_CONNECTIONS must be at least 8, got ${c.maxConnections}`);
  if (!['speed', 'memory'].includes(c.shardPlan)) bad(`RELAY_SHARD_PLAN must be speed or memory, got "${c.shardPlan}"`);
  if (c.queueMax < 0) bad(`RELAY_QUEUE_MAX must be >= 0, got ${c.queueMax}`);
  if (c.queueTimeoutMs < 1) bad(`RELAY_QUEUE_TIMEOUT_MS must be >= 1, got ${c.queueTimeoutMs}`);
  if (c.maxPlacementsPerModel < 0) bad(`RELAY_MAX_PLACEMENTS_PER_MODEL must be >= 0 (0 = no bound), got ${c.maxPlacementsPerModel}`);
  if (c.pushStallMs < 1000) bad(`RELAY_PUSH_STALL_MS must be at least 1000, got ${c.pushStallMs}`);
  if (c.loadBaseMs < 1) bad(`RELAY_LOAD_TIMEOUT_MS must be at least 1, got ${c.loadBaseMs}`);
  if (c.loadMsPerGib < 0) bad(`RELAY_LOAD_MS_PER_GIB must be >= 0, got ${c.loadMsPerGib}`);
  if (c.maxBodyBytes < 1024) bad(`RELAY_MAX_BODY_BYTES must be at least 1024, got ${c.maxBodyBytes}`);
}
