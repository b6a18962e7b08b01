import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import type { BackendChoice, GpuBackend } from './backend-choice.js';
import { moduleFileName } from './backends.js';
import { cacheRoot, packFromRegistry, run, type Progress } from './fetch.js';
import { chooseBackend, findLlama, installDir, isShippedFile, LAYOUT, LLAMA_SOURCE, readVersion, SERVER_BIN, type InstallManifest, type LlamaInstall } from './install.js';
import { processEnv } from '../config.js';
import { binaryPackageName } from '../app-files.js';
import { processExists } from './supervisor.js';

/** Building the shared llama.cpp (and GPU modules with a local toolkit) into the cache; install.ts finds it. */

const BACKEND_FLAGS: Record<GpuBackend, string[]> = {
  cuda: ['-DGGML_CUDA=ON'],
  vulkan: ['-DGGML_VULKAN=ON'],
  metal: ['-DGGML_METAL=ON'],
};

function hasCommand(cmd: string): boolean {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore', windowsHide: true }).status === 0;
}

/** Fetch and unpack the pinned llama.cpp source into `work/src`. */
export async function fetchSource(work: string, progress: Progress): Promise<string> {
  const src = join(work, 'src');
  if (existsSync(join(src, 'CMakeLists.txt')) && existsSync(join(src, 'tools', 'rpc'))) return src;
  mkdirSync(work, { recursive: true });
  const spec = `${LLAMA_SOURCE.package}@${LLAMA_SOURCE.version}`;
  const tgz = await packFromRegistry(LLAMA_SOURCE.package, LLAMA_SOURCE.version, LLAMA_SOURCE.integrity, work, progress, ErrorCode.LLAMA_SOURCE_INTEGRITY);
  await run('tar', ['-xzf', tgz, '-C', work, 'package/llama/gitRelease.bundle', 'package/llama/llama.cpp.info.json'], { progress });
  const info = JSON.parse(readFileSync(join(work, 'package', 'llama', 'llama.cpp.info.json'), 'utf8')) as { tag?: string };
  if (info.tag !== LLAMA_SOURCE.tag) {
    throw new RelayError(ErrorCode.LLAMA_SOURCE_INTEGRITY, `${spec} carries llama.cpp ${info.tag}, expected ${LLAMA_SOURCE.tag}`);
  }
  rmSync(src, { recursive: true, force: true });
  progress(`unpacking llama.cpp ${info.tag}`);
  await run('git', ['-c', 'advice.detachedHead=false', 'clone', '--quiet', join(work, 'package', 'llama', 'gitRelease.bundle'), src], { progress });
  rmSync(join(work, 'package'), { recursive: true, force: true });
  rmSync(tgz, { force: true });
  return src;
}

/**
 * The shared, relocatable build: loadable backends (GGML_BACKEND_DL) with one portable CPU variant built here
 * (all 14 variants cost ~11 more minutes on 2 cores), RPC, an unversioned libggml-base.so (the name the
 * prebuilt modules link against) and an `$ORIGIN` rpath. `gpu` adds that backend's module (a local toolkit).
 */
export function cmakeFlags(gpu: GpuBackend | null, useCcache: boolean): string[] {
  return [
    '-DCMAKE_BUILD_TYPE=Release',
    '-DGGML_RPC=ON',
    '-DLLAMA_OPENSSL=OFF',
    '-DLLAMA_BUILD_TESTS=OFF',
    '-DLLAMA_BUILD_EXAMPLES=OFF',
    // Portable: the binaries are cached and shipped, so they must not depend on this CPU's extensions.
    '-DGGML_NATIVE=OFF',
    '-DBUILD_SHARED_LIBS=ON',
    '-DGGML_BACKEND_DL=ON',
    '-DGGML_CPU_ALL_VARIANTS=OFF',
    '-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON',
    `-DCMAKE_INSTALL_RPATH=${process.platform === 'darwin' ? '@loader_path' : '$ORIGIN'}`,
    '-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON',
    // The web UI would be downloaded at configure time; relay starts llama-server with --no-webui anyway.
    '-DLLAMA_USE_PREBUILT_UI=OFF',
    ...(useCcache ? ['-DCMAKE_C_COMPILER_LAUNCHER=ccache', '-DCMAKE_CXX_COMPILER_LAUNCHER=ccache'] : []),
    // The base build is CPU + RPC everywhere (ggml turns Metal on by default on Apple): GPU backends are modules.
    ...(gpu ? BACKEND_FLAGS[gpu] : ['-DGGML_METAL=OFF']),
  ];
}

/** A lock directory with the owner's pid; a lock whose owner is gone is taken over. */
export async function withLock<T>(lockDir: string, progress: Progress, fn: () => Promise<T>): Promise<T> {
  for (let waited = 0; ; waited++) {
    try {
      mkdirSync(lockDir);
      writeFileSync(join(lockDir, 'pid'), String(process.pid));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let owner = NaN;
      try {
        owner = Number(readFileSync(join(lockDir, 'pid'), 'utf8'));
      } catch {
        /* being written */
      }
      // No pid yet (0 or unreadable: the owner is writing it) counts as alive.
      if (owner > 0 && !processExists(owner)) {
        rmSync(lockDir, { recursive: true, force: true });
        continue;
      }
      if (waited % 30 === 0) progress(`waiting for another build (pid ${owner}) to finish`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}

async function buildTargets(gpu: GpuBackend | null, env: NodeJS.ProcessEnv, progress: Progress, jobs: number | undefined): Promise<{ work: string; src: string; built: string; flags: string[] }> {
  const root = join(cacheRoot(env), 'llama.cpp');
  const work = join(root, '.work', `${LLAMA_SOURCE.tag}-${gpu ?? LAYOUT}`);
  const src = await fetchSource(work, progress);
  const build = join(work, 'build');
  const useCcache = hasCommand('ccache');
  const flags = cmakeFlags(gpu, useCcache);
  // Relative paths in ccache's keys: a rebuild in another checkout or cache dir still hits.
  const buildEnv = { ...processEnv(), CCACHE_BASEDIR: work };
  progress(`configuring llama.cpp ${LLAMA_SOURCE.tag} (${gpu ?? 'cpu + rpc'}, shared${useCcache ? ', ccache' : ''})`);
  await run('cmake', ['-S', src, '-B', build, ...flags], { env: buildEnv, progress, filter: (l) => /error|warning: .*backend|not found/i.test(l) });
  const j = jobs ?? availableParallelism();
  const targets = ['llama-server', 'ggml-rpc-server', ...(gpu ? [`ggml-${gpu}`] : [])];
  progress(`building ${targets.join(', ')} with ${j} jobs (several minutes on 2 cores without a ccache hit)`);
  let lastPct = -1;
  await run('cmake', ['--build', build, '--config', 'Release', '-j', String(j), '--target', ...targets], {
    env: buildEnv,
    progress,
    filter: (l) => {
      const m = /^\[\s*(\d+)%\]/.exec(l);
      if (m) {
        const pct = Number(m[1]);
        // Every new percent: a terminal shows it as a bar; logs keep one line in ten (TerminalProgress).
        if (pct > lastPct) {
          lastPct = pct;
          return true;
        }
        return false;
      }
      return /error/i.test(l);
    },
  });
  return { work, src, built: join(build, 'bin'), flags };
}

/** Build the shared llama.cpp into the cache (once per tag), or return the cached build at once. */
async function ensureBase(env: NodeJS.ProcessEnv, progress: Progress, jobs: number | undefined): Promise<LlamaInstall> {
  const found = findLlama({ env });
  if (found) return found;
  const dir = installDir(env);
  mkdirSync(join(cacheRoot(env), 'llama.cpp'), { recursive: true });
  await withLock(`${dir}.lock`, progress, async () => {
    if (findLlama({ env })) return;
    // The releases and the npm binary packages ship it built; here (a checkout, or a platform without one) it is built once.
    progress(`no llama.cpp shipped for ${process.platform}-${process.arch} in this install (${binaryPackageName()} is not installed): building it from the pinned source, once`);
    const { work, src, built, flags } = await buildTargets(null, env, progress, jobs);
    const stage = `${dir}.staging-${process.pid}`;
    rmSync(stage, { recursive: true, force: true });
    mkdirSync(join(stage, 'bin'), { recursive: true });
    mkdirSync(join(stage, 'models'), { recursive: true });
    for (const f of readdirSync(built).filter(isShippedFile)) copyFileSync(join(built, f), join(stage, 'bin', f));
    for (const f of readdirSync(join(src, 'models'))) {
      if (/^ggml-vocab-.*\.gguf$/.test(f)) copyFileSync(join(src, 'models', f), join(stage, 'models', f));
    }
    // llama.cpp's own Python GGUF reader: the test suite's independent oracle for relay's reader.
    cpSync(join(src, 'gguf-py', 'gguf'), join(stage, 'gguf-py', 'gguf'), { recursive: true });
    const version = readVersion(join(stage, 'bin', SERVER_BIN));
    const manifest: InstallManifest = {
      tag: LLAMA_SOURCE.tag,
      layout: LAYOUT,
      version,
      sourcePackage: `${LLAMA_SOURCE.package}@${LLAMA_SOURCE.version}`,
      cmakeFlags: flags,
      builtAt: new Date().toISOString(),
    };
    writeFileSync(join(stage, 'install.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    // Modules built from source earlier survive a rebuild of the base (same tag, same ABI).
    if (existsSync(join(dir, 'backends'))) renameSync(join(dir, 'backends'), join(stage, 'backends'));
    rmSync(dir, { recursive: true, force: true });
    renameSync(stage, dir);
    // Source and object files are large; ccache (when present) keeps what a rebuild needs.
    rmSync(work, { recursive: true, force: true });
    progress(`installed ${dir} (${statSync(join(dir, 'bin', SERVER_BIN)).size >> 20} MiB llama-server)`);
  });
  const done = findLlama({ env });
  if (!done) throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `build finished but ${dir} is incomplete`);
  return done;
}

/**
 * `relay llama build --backend cuda|vulkan|metal`: build that backend's module from the same source with a
 * local toolkit, into `<install>/backends/<backend>/`, where backend selection prefers it to a prebuilt one.
 */
export async function buildBackendModule(gpu: GpuBackend, opts: { env?: NodeJS.ProcessEnv; progress?: Progress; jobs?: number } = {}): Promise<string> {
  const env = opts.env ?? processEnv();
  const progress = opts.progress ?? ((l: string) => process.stderr.write(`${l}\n`));
  const base = await ensureBase(env, progress, opts.jobs);
  if (base.source === 'env') throw new RelayError(ErrorCode.INVALID_ARGUMENT, 'RELAY_LLAMA_BIN_DIR is set: build your GPU backend in your own tree');
  if (base.source === 'shipped') {
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, `this relay ships llama.cpp ready-built (${base.binDir}) with its GPU modules: building one needs relay from source (a checkout)`);
  }
  const out = join(base.modulesDir, gpu, moduleFileName(gpu));
  await withLock(`${installDir(env)}.${gpu}.lock`, progress, async () => {
    const { work, built } = await buildTargets(gpu, env, progress, opts.jobs);
    const file = join(built, moduleFileName(gpu));
    if (!existsSync(file)) throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `the ${gpu} build left no ${file}`);
    mkdirSync(join(base.modulesDir, gpu), { recursive: true });
    copyFileSync(file, `${out}.tmp`);
    renameSync(`${out}.tmp`, out);
    rmSync(work, { recursive: true, force: true });
    progress(`installed ${out}`);
  });
  return out;
}

/**
 * The binaries every path uses (hub, node, tray app): the cached shared build (built on first use) or
 * RELAY_LLAMA_BIN_DIR, running the backend this machine has (`backend` / RELAY_LLAMA_BACKEND override
 * auto-detection; see backends.ts).
 */
export async function ensureLlama(opts: { backend?: BackendChoice; env?: NodeJS.ProcessEnv; progress?: Progress; jobs?: number } = {}): Promise<LlamaInstall> {
  const env = opts.env ?? processEnv();
  const progress = opts.progress ?? ((l: string) => process.stderr.write(`${l}\n`));
  const base = await ensureBase(env, progress, opts.jobs);
  const { install } = await chooseBackend(base, { choice: opts.backend, env, progress });
  return install;
}
