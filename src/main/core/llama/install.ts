import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { devicePrefix, GPU_BACKENDS, type BackendChoice, type GpuBackend } from './backend-choice.js';
import { backendChoiceFromEnv, backendEnv, listDevicesWith, modulesIn, resolveBackend, shippedModulesIn, type BackendResolution } from './backends.js';
import { cacheRoot, type Progress } from './fetch.js';
import { processEnv } from '../config.js';
import { appLayout, shippedLlamaDir } from '../app-files.js';

export { cacheRoot, type Progress } from './fetch.js';

/**
 * The llama.cpp source relay builds: the git bundle inside a pinned node-llama-cpp tarball, fetched through
 * the npm registry (the only place this product may download from) and checked against its recorded hash.
 */
export const LLAMA_SOURCE = {
  package: 'node-llama-cpp',
  version: '3.21.1',
  integrity: 'sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg==',
  /** llama/llama.cpp.info.json "tag" inside that tarball; checked after extraction. */
  tag: 'v0.4.0',
} as const;

/** The two programs' file names on `platform` (a packaged app's resources/llama holds them; so does RELAY_LLAMA_BIN_DIR). */
export function binaryNames(platform: NodeJS.Platform = process.platform): { server: string; rpc: string } {
  const exe = platform === 'win32' ? '.exe' : '';
  return { server: `llama-server${exe}`, rpc: `ggml-rpc-server${exe}` };
}
export const SERVER_BIN = binaryNames().server;
export const RPC_BIN = binaryNames().rpc;

export interface LlamaInstall {
  readonly binDir: string;
  readonly serverPath: string;
  readonly rpcServerPath: string;
  /** llama.cpp vocab-only GGUFs copied from the source tree (absent for a user's own build). */
  readonly vocabDir: string | null;
  /** llama.cpp's gguf-py package (PYTHONPATH root), copied from the same source; absent for a user's build. */
  readonly ggufPyDir: string | null;
  readonly tag: string;
  /** `llama-server --version` output: nodes and hub must match for ggml RPC to work. */
  readonly version: string;
  /** RELAY_LLAMA_BIN_DIR, built here into the cache, or shipped built with relay (a release, the npm binary package). */
  readonly source: 'env' | 'cache' | 'shipped';
  /** The backend every child runs: the CPU build alone, or the GPU module below loaded into it. */
  readonly backend: 'cpu' | GpuBackend;
  readonly backendModule: string | null;
  /** Why this backend (what was found, what was missing); `relay doctor` prints it. */
  readonly backendReason: string;
  /** Environment every llama-server / ggml-rpc-server child gets on top of relay's own. */
  readonly env: Readonly<Record<string, string>>;
  /** Modules built here from source (cache: `backends/<backend>/`) or shipped with the app (`<bin>/backends/<package id>/`). */
  readonly modulesDir: string;
}

export interface InstallManifest {
  tag: string;
  layout: string;
  version: string;
  sourcePackage: string;
  cmakeFlags: string[];
  builtAt: string;
}

/**
 * One build per llama.cpp tag: shared libraries with loadable backends (GGML_BACKEND_DL), the CPU backend and
 * RPC built here, `$ORIGIN` rpath so the folder can be copied (cache, packaged app). GPU backends are modules
 * loaded into it at run time (backends.ts). `shared` names this layout; the static builds before it are
 * `<tag>-cpu` and no longer read.
 */
export const LAYOUT = 'shared';

/** The environment a binary of `install` runs in: `base` (the process's) with the backend's variables on top, which no caller can drop. */
export function installEnv(install: Pick<LlamaInstall, 'env'>, base: NodeJS.ProcessEnv = processEnv()): NodeJS.ProcessEnv {
  return { ...base, ...install.env };
}

export function installDir(env: NodeJS.ProcessEnv = processEnv()): string {
  return join(cacheRoot(env), 'llama.cpp', `${LLAMA_SOURCE.tag}-${LAYOUT}`);
}

export function readVersion(serverPath: string): string {
  const r = spawnSync(serverPath, ['--version'], { encoding: 'utf8', timeout: 15_000, windowsHide: true });
  const text = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const line = text.split('\n').find((l) => l.startsWith('version:'));
  return (line ?? text.trim().split('\n')[0] ?? 'unknown').trim();
}

/**
 * The binaries in use, without building or choosing a GPU backend (the result runs the CPU):
 * RELAY_LLAMA_BIN_DIR (a user's own build, or a packaged app's) wins, then what this install ships (a release's
 * llama/, the npm binary package's), then the cache. Null when none has them.
 */
export function findLlama(opts: { env?: NodeJS.ProcessEnv } = {}): LlamaInstall | null {
  const env = opts.env ?? processEnv();
  const custom = env.RELAY_LLAMA_BIN_DIR;
  const cpu = { backend: 'cpu' as const, backendModule: null, backendReason: 'the CPU build (no GPU backend chosen yet)', env: {} };
  if (custom) {
    const { serverPath, rpcServerPath } = binariesIn(custom);
    const version = readVersion(serverPath);
    return { binDir: custom, serverPath, rpcServerPath, vocabDir: null, ggufPyDir: null, tag: version, version, source: 'env', modulesDir: join(custom, 'backends'), ...cpu };
  }
  const shipped = shippedLlamaDir();
  if (shipped) {
    const { serverPath, rpcServerPath } = binariesIn(shipped);
    const version = readVersion(serverPath);
    return { binDir: shipped, serverPath, rpcServerPath, vocabDir: null, ggufPyDir: null, tag: version, version, source: 'shipped', modulesDir: join(shipped, 'backends'), ...cpu };
  }
  const dir = installDir(env);
  const manifestPath = join(dir, 'install.json');
  if (!existsSync(manifestPath)) return null;
  const m = JSON.parse(readFileSync(manifestPath, 'utf8')) as InstallManifest;
  const binDir = join(dir, 'bin');
  return {
    binDir,
    serverPath: join(binDir, SERVER_BIN),
    rpcServerPath: join(binDir, RPC_BIN),
    vocabDir: join(dir, 'models'),
    ggufPyDir: join(dir, 'gguf-py'),
    tag: m.tag,
    version: m.version,
    source: 'cache',
    modulesDir: join(dir, 'backends'),
    ...cpu,
  };
}

/**
 * The two programs in `dir` (RELAY_LLAMA_BIN_DIR; a packaged app's resources/llama) as `platform` names them,
 * or LLAMA_NOT_FOUND naming the first one missing. Nothing is run.
 */
export function binariesIn(dir: string, platform: NodeJS.Platform = process.platform): { serverPath: string; rpcServerPath: string } {
  const names = binaryNames(platform);
  const serverPath = join(dir, names.server);
  const rpcServerPath = join(dir, names.rpc);
  for (const p of [serverPath, rpcServerPath]) {
    if (!existsSync(p)) throw new RelayError(ErrorCode.LLAMA_NOT_FOUND, `the llama.cpp folder ${dir} has no ${p}`, { path: p });
  }
  return { serverPath, rpcServerPath };
}

/** The same binaries running `r`'s backend. */
export function withBackend(install: LlamaInstall, r: Pick<BackendResolution, 'backend' | 'module' | 'reason'>): LlamaInstall {
  return { ...install, backend: r.backend, backendModule: r.module, backendReason: r.reason, env: backendEnv(r.module, r.backend) };
}

/** Choose the backend for `install` (see backends.ts): source-built or shipped modules first, then the registry's. */
export async function chooseBackend(
  install: LlamaInstall,
  opts: { choice?: BackendChoice; env?: NodeJS.ProcessEnv; progress?: Progress } = {},
): Promise<{ install: LlamaInstall; resolution: BackendResolution }> {
  const env = opts.env ?? processEnv();
  const choice = opts.choice ?? backendChoiceFromEnv(env);
  if (install.source === 'env' && choice === 'auto') {
    // A user's own build (RELAY_LLAMA_BIN_DIR) may have its GPU backend built in or beside it: then it is used
    // as it is, with no module added (a second copy of a backend would list the card twice).
    const own = builtInBackend(install.serverPath, env);
    if (own) return { install: withBackend(install, own), resolution: own };
  }
  const resolution = await resolveBackend({
    serverPath: install.serverPath,
    choice,
    sourceModules: install.source === 'cache' ? modulesIn(install.modulesDir) : {},
    shipped: install.source === 'cache' ? {} : shippedModulesIn(install.modulesDir),
    offline: install.source === 'shipped' && appLayout().kind === 'release',
    env,
    progress: opts.progress,
  });
  return { install: withBackend(install, resolution), resolution };
}

/** The GPU backend a build lists on its own (no module added), or null for a CPU-only build. */
export function builtInBackend(serverPath: string, env: NodeJS.ProcessEnv): BackendResolution | null {
  const { devices } = listDevicesWith(serverPath, null, env);
  const gpu = GPU_BACKENDS.find((b) => devices.some((d) => d.name.startsWith(devicePrefix(b))));
  if (!gpu) return null;
  const names = devices.map((d) => `${d.name} ${d.description}`).join(', ');
  return { backend: gpu, module: null, from: null, devices, notes: [], reason: `RELAY_LLAMA_BIN_DIR's own build lists ${names}: using it as it is` };
}

/** What a build of `platform` leaves in its bin folder that an install or a packaged app keeps: the two binaries and that platform's shared libraries. */
export function shippedFileRule(platform: NodeJS.Platform): (name: string) => boolean {
  const { server, rpc } = binaryNames(platform);
  const lib = platform === 'win32' ? /\.dll$/i : platform === 'darwin' ? /\.(dylib|so)$/ : /\.so(\.\d+)*$/;
  return (name) => name === server || name === rpc || lib.test(name);
}

/** shippedFileRule of this machine. */
export function isShippedFile(name: string): boolean {
  return shippedFileRule(process.platform)(name);
}
