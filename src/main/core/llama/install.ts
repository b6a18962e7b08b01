import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync, cpSync, createReadStream, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync,
} from 'node:fs';
import { homedir, availableParallelism } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { ErrorCode, RelayError } from '../../../shared/errors.js';

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

export const BACKENDS = ['cpu', 'cuda', 'vulkan', 'metal'] as const;
export type Backend = (typeof BACKENDS)[number];

const BACKEND_FLAGS: Record<Backend, string[]> = {
  cpu: [],
  cuda: ['-DGGML_CUDA=ON'],
  vulkan: ['-DGGML_VULKAN=ON'],
  metal: ['-DGGML_METAL=ON'],
};

const EXE = process.platform === 'win32' ? '.exe' : '';
export const SERVER_BIN = `llama-server${EXE}`;
export const RPC_BIN = `ggml-rpc-server${EXE}`;

export interface LlamaInstall {
  readonly binDir: string;
  readonly serverPath: string;
  readonly rpcServerPath: string;
  /** llama.cpp vocab-only GGUFs copied from the source tree (absent for a user's own build). */
  readonly vocabDir: string | null;
  /** llama.cpp's gguf-py package (PYTHONPATH root), copied from the same source; absent for a user's build. */
  readonly ggufPyDir: string | null;
  readonly tag: string;
  readonly backend: Backend | 'custom';
  /** `llama-server --version` output: nodes and hub must match for ggml RPC to work. */
  readonly version: string;
  readonly source: 'env' | 'cache';
}

interface InstallManifest {
  tag: string;
  backend: Backend;
  version: string;
  sourcePackage: string;
  cmakeFlags: string[];
  builtAt: string;
}

export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.RELAY_CACHE_DIR ?? join(homedir(), '.cache', 'relay');
}

export function installDir(backend: Backend, env: NodeJS.ProcessEnv = process.env): string {
  return join(cacheRoot(env), 'llama.cpp', `${LLAMA_SOURCE.tag}-${backend}`);
}

export function readVersion(serverPath: string): string {
  const r = spawnSync(serverPath, ['--version'], { encoding: 'utf8', timeout: 15_000 });
  const text = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const line = text.split('\n').find((l) => l.startsWith('version:'));
  return (line ?? text.trim().split('\n')[0] ?? 'unknown').trim();
}

/**
 * The binaries in use, without building: RELAY_LLAMA_BIN_DIR (a user's own build) wins, then the cache.
 * Returns null when neither has them.
 */
export function findLlama(opts: { backend?: Backend; env?: NodeJS.ProcessEnv } = {}): LlamaInstall | null {
  const env = opts.env ?? process.env;
  const custom = env.RELAY_LLAMA_BIN_DIR;
  if (custom) {
    const serverPath = join(custom, SERVER_BIN);
    const rpcServerPath = join(custom, RPC_BIN);
    for (const p of [serverPath, rpcServerPath]) {
      if (!existsSync(p)) throw new RelayError(ErrorCode.LLAMA_NOT_FOUND, `RELAY_LLAMA_BIN_DIR=${custom} has no ${p}`, { path: p });
    }
    const version = readVersion(serverPath);
    return { binDir: custom, serverPath, rpcServerPath, vocabDir: null, ggufPyDir: null, tag: version, backend: 'custom', version, source: 'env' };
  }
  const dir = installDir(opts.backend ?? 'cpu', env);
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
    backend: m.backend,
    version: m.version,
    source: 'cache',
  };
}

export type Progress = (line: string) => void;

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; progress: Progress; filter?: (l: string) => boolean }): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const tail: string[] = [];
    const onLine = (l: string): void => {
      tail.push(l);
      if (tail.length > 40) tail.shift();
      if (!opts.filter || opts.filter(l)) opts.progress(l);
    };
    createInterface({ input: child.stdout }).on('line', onLine);
    createInterface({ input: child.stderr }).on('line', onLine);
    child.on('error', (err) => reject(new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `${cmd}: ${err.message}`, { cmd })));
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `${cmd} ${args.join(' ')} exited with ${code}\n${tail.join('\n')}`, { cmd, code }));
    });
  });
}

async function sha512Base64(path: string): Promise<string> {
  const h = createHash('sha512');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('base64');
}

function hasCommand(cmd: string): boolean {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
}

/** Fetch and unpack the pinned llama.cpp source into `work/src`. */
async function fetchSource(work: string, progress: Progress): Promise<string> {
  const src = join(work, 'src');
  if (existsSync(join(src, 'CMakeLists.txt')) && existsSync(join(src, 'tools', 'rpc'))) return src;
  mkdirSync(work, { recursive: true });
  const spec = `${LLAMA_SOURCE.package}@${LLAMA_SOURCE.version}`;
  const tgz = join(work, `${LLAMA_SOURCE.package}-${LLAMA_SOURCE.version}.tgz`);
  if (!existsSync(tgz)) {
    progress(`fetching ${spec} from the npm registry (35 MB, source only; nothing is installed)`);
    await run('npm', ['pack', spec, '--pack-destination', work, '--silent'], { cwd: work, progress, filter: () => false });
  }
  const got = `sha512-${await sha512Base64(tgz)}`;
  if (got !== LLAMA_SOURCE.integrity) {
    rmSync(tgz, { force: true });
    throw new RelayError(ErrorCode.LLAMA_SOURCE_INTEGRITY, `${tgz} has integrity ${got}, expected ${LLAMA_SOURCE.integrity}`, { got });
  }
  progress(`verified ${spec} (${LLAMA_SOURCE.integrity.slice(0, 20)}…)`);
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

export function cmakeFlags(backend: Backend, useCcache: boolean): string[] {
  return [
    '-DCMAKE_BUILD_TYPE=Release',
    '-DGGML_RPC=ON',
    '-DLLAMA_CURL=OFF',
    '-DLLAMA_OPENSSL=OFF',
    '-DLLAMA_BUILD_TESTS=OFF',
    '-DLLAMA_BUILD_EXAMPLES=OFF',
    // Portable: the binaries are cached and shipped, so they must not depend on this CPU's extensions.
    '-DGGML_NATIVE=OFF',
    // Static: the two binaries are self-contained and can be copied (cache, app extraResources).
    '-DBUILD_SHARED_LIBS=OFF',
    ...(useCcache ? ['-DCMAKE_C_COMPILER_LAUNCHER=ccache', '-DCMAKE_CXX_COMPILER_LAUNCHER=ccache'] : []),
    ...BACKEND_FLAGS[backend],
  ];
}

/** A lock directory with the owner's pid; a lock whose owner is gone is taken over. */
async function withLock<T>(lockDir: string, progress: Progress, fn: () => Promise<T>): Promise<T> {
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
      } catch { /* being written */ }
      let alive = false;
      try {
        if (owner > 0) { process.kill(owner, 0); alive = true; }
      } catch { /* gone */ }
      if (!alive && Number.isFinite(owner)) {
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

/**
 * Build llama-server and ggml-rpc-server for `backend` into the cache, or return the cached build at once.
 * Honors RELAY_LLAMA_BIN_DIR (then nothing is built).
 */
export async function ensureLlama(opts: { backend?: Backend; env?: NodeJS.ProcessEnv; progress?: Progress; jobs?: number } = {}): Promise<LlamaInstall> {
  const env = opts.env ?? process.env;
  const backend = opts.backend ?? 'cpu';
  const progress = opts.progress ?? ((l: string) => process.stderr.write(`${l}\n`));
  const found = findLlama({ backend, env });
  if (found) return found;

  const dir = installDir(backend, env);
  const root = join(cacheRoot(env), 'llama.cpp');
  mkdirSync(root, { recursive: true });
  await withLock(`${dir}.lock`, progress, async () => {
    if (findLlama({ backend, env })) return;
    const work = join(root, '.work', `${LLAMA_SOURCE.tag}-${backend}`);
    const src = await fetchSource(work, progress);
    const build = join(work, 'build');
    const useCcache = hasCommand('ccache');
    const flags = cmakeFlags(backend, useCcache);
    // Relative paths in ccache's keys: a rebuild in another checkout or cache dir still hits.
    const buildEnv = { ...process.env, CCACHE_BASEDIR: work };
    progress(`configuring llama.cpp ${LLAMA_SOURCE.tag} (${backend}${useCcache ? ', ccache' : ''})`);
    await run('cmake', ['-S', src, '-B', build, ...flags], { env: buildEnv, progress, filter: (l) => /error|warning: .*backend|not found/i.test(l) });
    const jobs = opts.jobs ?? availableParallelism();
    progress(`building llama-server and ggml-rpc-server with ${jobs} jobs (several minutes on 2 cores without a ccache hit)`);
    let lastPct = -1;
    await run('cmake', ['--build', build, '--config', 'Release', '-j', String(jobs), '--target', 'llama-server', 'ggml-rpc-server'], {
      env: buildEnv,
      progress,
      filter: (l) => {
        const m = /^\[\s*(\d+)%\]/.exec(l);
        if (m) {
          const pct = Number(m[1]);
          if (pct >= lastPct + 10 || (pct === 100 && lastPct !== 100)) { lastPct = pct; return true; }
          return false;
        }
        return /error/i.test(l);
      },
    });

    const stage = `${dir}.staging-${process.pid}`;
    rmSync(stage, { recursive: true, force: true });
    mkdirSync(join(stage, 'bin'), { recursive: true });
    mkdirSync(join(stage, 'models'), { recursive: true });
    const built = join(build, 'bin');
    for (const b of [SERVER_BIN, RPC_BIN]) copyFileSync(join(built, b), join(stage, 'bin', b));
    for (const f of readdirSync(join(src, 'models'))) {
      if (/^ggml-vocab-.*\.gguf$/.test(f)) copyFileSync(join(src, 'models', f), join(stage, 'models', f));
    }
    // llama.cpp's own Python GGUF reader: the test suite's independent oracle for relay's reader.
    cpSync(join(src, 'gguf-py', 'gguf'), join(stage, 'gguf-py', 'gguf'), { recursive: true });
    const version = readVersion(join(stage, 'bin', SERVER_BIN));
    const manifest: InstallManifest = {
      tag: LLAMA_SOURCE.tag,
      backend,
      version,
      sourcePackage: `${LLAMA_SOURCE.package}@${LLAMA_SOURCE.version}`,
      cmakeFlags: flags,
      builtAt: new Date().toISOString(),
    };
    writeFileSync(join(stage, 'install.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(stage, dir);
    // Source and object files are large; ccache (when present) keeps what a rebuild needs.
    rmSync(work, { recursive: true, force: true });
    progress(`installed ${dir} (${statSync(join(dir, 'bin', SERVER_BIN)).size >> 20} MiB llama-server)`);
  });
  const done = findLlama({ backend, env });
  if (!done) throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `build finished but ${dir} is incomplete`);
  return done;
}
