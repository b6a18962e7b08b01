import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import {
  BACKEND_PACKAGES,
  backendCandidates,
  describeCandidate,
  devicePrefix,
  GPU_BACKENDS,
  librariesToProbe,
  type BackendChoice,
  type BackendPackage,
  type Candidate,
  type GpuBackend,
  type MachineProbe,
} from './backend-choice.js';
import { parseListDevices, type ListedDevice } from './devices.js';
import { cacheRoot, packFromRegistry, type Progress } from './fetch.js';
import { processEnv } from '../config.js';
import { requireNative } from '../app-files.js';
import { cudaDriverLibrary, systemLibraryPath } from '../gpu/names.js';
import { nvidiaSmiCommand } from '../gpu/smi.js';

/**
 * The I/O half of backend selection: probe the machine with its real loaders, fetch a prebuilt module through
 * the npm registry (pinned, integrity-checked), and keep the first candidate whose module makes
 * `llama-server --list-devices` show a device of its kind.
 *
 * The chosen module is not copied beside the binaries: every child relay starts gets it through
 * GGML_BACKEND_PATH (ggml_backend_load_all loads it after the modules in the executable's folder). One module
 * per process, chosen explicitly: CUDA 12 and 13 modules cannot sit side by side, a CUDA and a Vulkan module
 * would list one card twice, and a failed load is reported instead of skipped silently.
 */

export interface BackendResolution {
  readonly backend: 'cpu' | GpuBackend;
  /** The module every child loads (GGML_BACKEND_PATH); null = the CPU build alone. */
  readonly module: string | null;
  readonly from: 'source' | 'package' | 'shipped' | null;
  /** `--list-devices` with that module (RPC devices excluded). */
  readonly devices: readonly ListedDevice[];
  /** One line a user reads in `relay doctor` and the hub's log, e.g. "NVIDIA driver found, CUDA runtime missing: using Vulkan". */
  readonly reason: string;
  readonly notes: readonly string[];
}

export function backendChoiceFromEnv(env: NodeJS.ProcessEnv = processEnv()): BackendChoice {
  const v = (env.RELAY_LLAMA_BACKEND ?? 'auto').trim() || 'auto';
  if (!(['auto', 'cpu', ...GPU_BACKENDS] as string[]).includes(v)) {
    throw new RelayError(ErrorCode.INVALID_ARGUMENT, `unknown backend "${v}" (one of auto, cpu, ${GPU_BACKENDS.join(', ')})`);
  }
  return v as BackendChoice;
}

function libraryLoads(name: string, env: NodeJS.ProcessEnv): boolean {
  try {
    const koffi = requireNative<typeof import('koffi')>('koffi');
    const lib = koffi.load(systemLibraryPath(name, process.platform, env));
    lib.unload();
    return true;
  } catch {
    return false;
  }
}

/** Vulkan driver manifests the loader reads. Windows drivers register in the registry instead: none listed there. */
function vulkanIcds(env: NodeJS.ProcessEnv, platform: NodeJS.Platform = process.platform): string[] {
  const explicit = env.VK_DRIVER_FILES ?? env.VK_ICD_FILENAMES;
  if (explicit) return explicit.split(platform === 'win32' ? ';' : ':').filter((f) => existsSync(f));
  if (platform === 'win32') return [];
  const dirs = ['/usr/share/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/etc/vulkan/icd.d'];
  return dirs.flatMap((d) => {
    try {
      return readdirSync(d)
        .filter((f) => f.endsWith('.json'))
        .map((f) => join(d, f));
    } catch {
      return [];
    }
  });
}

/** Where `relay llama build --backend B` puts a module built here, and where a packaged app ships them. */
export function moduleFileName(b: GpuBackend, platform: NodeJS.Platform = process.platform): string {
  // ggml names loadable backends libggml-<name>.so on every platform but Windows.
  return platform === 'win32' ? `ggml-${b}.dll` : `libggml-${b}.so`;
}

/** Modules built here from source: `dir/<backend>/libggml-<backend>.so`. */
export function modulesIn(dir: string): Partial<Record<GpuBackend, string>> {
  const out: Partial<Record<GpuBackend, string>> = {};
  for (const b of GPU_BACKENDS) {
    const p = join(dir, b, moduleFileName(b));
    if (existsSync(p)) out[b] = p;
  }
  return out;
}

/** Prebuilt modules shipped with a packaged app for `platform`, by package id: `dir/<id>/libggml-<backend>.so`, `ggml-<backend>.dll` on Windows (scripts/stage-llama.mjs). */
export function shippedModulesIn(dir: string, packages: readonly BackendPackage[] = BACKEND_PACKAGES, platform: NodeJS.Platform = process.platform): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of packages.filter((x) => x.platform === platform)) {
    const f = join(dir, p.id, moduleFileName(p.backend, platform));
    if (existsSync(f)) out[p.id] = f;
  }
  return out;
}

/** Null when koffi (the FFI every library probe goes through) loads, else what went wrong, naming the module. */
function ffiProblem(): string | null {
  try {
    requireNative('koffi');
    return null;
  } catch (err) {
    const first = String((err as Error).message).split('\n')[0];
    return `koffi's native module for ${process.platform}-${process.arch} did not load (${first})`;
  }
}

export function probeMachine(sourceModules: Partial<Record<GpuBackend, string>>, env: NodeJS.ProcessEnv = processEnv()): MachineProbe {
  const ffi = ffiProblem();
  const libs: Record<string, boolean> = {};
  for (const l of new Set([cudaDriverLibrary(process.platform), ...librariesToProbe(process.platform, process.arch)])) libs[l] = ffi === null && libraryLoads(l, env);
  const cmd = nvidiaSmiCommand(process.platform, env);
  const smi = cmd === null ? null : spawnSync(cmd, ['-L'], { encoding: 'utf8', timeout: 10_000, windowsHide: true });
  return { platform: process.platform, arch: process.arch, libs, ffi, nvidiaSmi: smi?.status === 0, vulkanIcds: vulkanIcds(env), sourceModules };
}

/** The environment a child needs to load `module` (and, for CUDA, number devices like NVML does). */
export function backendEnv(module: string | null, backend: 'cpu' | GpuBackend): Record<string, string> {
  const env: Record<string, string> = {};
  if (module) env.GGML_BACKEND_PATH = module;
  // NVML numbers GPUs by PCI bus id; CUDA's default order is "fastest first". Same order, same index.
  if (backend === 'cuda') env.CUDA_DEVICE_ORDER = 'PCI_BUS_ID';
  return env;
}

/** `llama-server --list-devices` with a backend module loaded; RPC devices are left out. */
export function listDevicesWith(serverPath: string, module: string | null, env: NodeJS.ProcessEnv = processEnv()): { devices: ListedDevice[]; output: string } {
  const r = spawnSync(serverPath, ['--list-devices'], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...env, ...(module ? { GGML_BACKEND_PATH: module } : {}) },
    windowsHide: true,
  });
  const output = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  return { devices: parseListDevices(output).filter((d) => !d.name.startsWith('RPC')), output };
}

/** The module file of a prebuilt package in the cache, fetched and verified on first use. */
export async function ensurePackageModule(pkg: BackendPackage, env: NodeJS.ProcessEnv, progress: Progress): Promise<string> {
  const dir = join(cacheRoot(env), 'llama.cpp', 'modules', `${pkg.id}-${pkg.version}`);
  const existing = existsSync(dir) ? readdirSync(dir).find((f) => /^(lib)?ggml-\w+\.(so|dll|dylib)$/.test(f)) : undefined;
  if (existing) return join(dir, existing);
  const work = `${dir}.work-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const tgz = await packFromRegistry(pkg.package, pkg.version, pkg.integrity, work, progress, ErrorCode.BACKEND_INTEGRITY);
    const list = spawnSync('tar', ['-tzf', tgz], { encoding: 'utf8', maxBuffer: 16 << 20, windowsHide: true });
    const member = (list.stdout ?? '').split('\n').find((f) => pkg.file.test(f));
    if (!member) throw new RelayError(ErrorCode.BACKEND_INTEGRITY, `${pkg.package}@${pkg.version} has no file matching ${pkg.file}`);
    const x = spawnSync('tar', ['-xzf', tgz, '-C', work, member], { encoding: 'utf8', windowsHide: true });
    if (x.status !== 0) throw new RelayError(ErrorCode.BACKEND_INTEGRITY, `could not unpack ${member}: ${x.stderr}`);
    const out = join(work, 'out');
    mkdirSync(out);
    renameSync(join(work, member), join(out, basename(member)));
    rmSync(dir, { recursive: true, force: true });
    renameSync(out, dir);
    progress(`installed ${pkg.backend} module ${join(dir, basename(member))}`);
    return join(dir, basename(member));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Pick the backend: candidates in order, each verified by `--list-devices`; the CPU when none shows a device.
 * `shipped` modules (a packaged app's, by package id) stand in for registry packages and are never fetched.
 * An explicit GPU choice that cannot be met is an error; `auto` falls back to the CPU and says why.
 */
export async function resolveBackend(opts: {
  serverPath: string;
  choice: BackendChoice;
  sourceModules: Partial<Record<GpuBackend, string>>;
  shipped?: Readonly<Record<string, string>>;
  /** A portable release: what it does not ship is not fetched either (nothing is downloaded on its machine). */
  offline?: boolean;
  env?: NodeJS.ProcessEnv;
  progress?: Progress;
  probe?: MachineProbe;
}): Promise<BackendResolution> {
  const env = opts.env ?? processEnv();
  const progress = opts.progress ?? (() => undefined);
  const probe = opts.probe ?? probeMachine(opts.sourceModules, env);
  const { candidates, notes: left } = backendCandidates(probe, opts.choice);
  const notes = [...left];
  const tried = new Set<string>();
  for (const c of candidates) {
    let module: string;
    let from: BackendResolution['from'] = c.from;
    try {
      if (c.from === 'source') module = c.module;
      else if (opts.shipped?.[c.pkg.id]) {
        module = opts.shipped[c.pkg.id]!;
        from = 'shipped';
      } else if (opts.offline) {
        const how = c.pkg.backend === 'cuda' ? `\`npm run release -- --cuda ${c.pkg.id === 'cuda12' ? '12' : '13'}\` ships it, or ` : '';
        notes.push(`${describeCandidate(c)} is not in this release (${how}install relay with npm)`);
        continue;
      } else module = await ensurePackageModule(c.pkg, env, progress);
    } catch (err) {
      notes.push(`${describeCandidate(c)}: ${(err as Error).message.split('\n')[0]}`);
      continue;
    }
    if (tried.has(module)) continue;
    tried.add(module);
    // Verified with the environment its children will get (CUDA numbered in PCI bus order).
    const { devices, output } = listDevicesWith(opts.serverPath, module, { ...env, ...backendEnv(module, c.backend) });
    const mine = devices.filter((d) => d.name.startsWith(devicePrefix(c.backend)));
    if (mine.length > 0) {
      const why = notes.length > 0 ? `${notes.join('; ')}: ` : '';
      return {
        backend: c.backend,
        module,
        from,
        devices,
        notes,
        reason: `${why}using ${describeCandidate(c)}: ${mine.map((d) => `${d.name} ${d.description}`).join(', ')}`,
      };
    }
    notes.push(`${describeCandidate(c)} lists no ${devicePrefix(c.backend)} device${hint(c, output)}`);
  }
  if (opts.choice !== 'auto' && opts.choice !== 'cpu') {
    throw new RelayError(ErrorCode.BACKEND_UNAVAILABLE, `backend ${opts.choice} cannot run here: ${notes.join('; ') || 'no candidate'}`, { notes });
  }
  const { devices } = listDevicesWith(opts.serverPath, null, env);
  return { backend: 'cpu', module: null, from: null, devices, notes, reason: `${notes.length > 0 ? `${notes.join('; ')}: ` : ''}using the CPU` };
}

function hint(c: Candidate, output: string): string {
  // ggml-vulkan skips, without a word, devices that report themselves as CPUs (Mesa's lavapipe).
  if (c.backend === 'vulkan') return ' (only a software device? lavapipe is listed with GGML_VK_VISIBLE_DEVICES=0)';
  const line = output.split('\n').find((l) => /cannot open shared object|failed to load/i.test(l));
  return line ? ` (${line.trim()})` : '';
}
