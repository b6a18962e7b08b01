import { existsSync } from 'node:fs';
import { requireNative } from '../app-files.js';
import { processEnv } from '../config.js';
import { isFullPath, nvmlCandidates, nvmlName } from './names.js';

/**
 * NVIDIA GPU readings through NVML, loaded with the koffi FFI binding (there is no maintained NVML package
 * on npm). Returns null wherever the driver library is absent, so callers fall back to nvidia-smi, then to
 * llama-server's own device list.
 */
export interface GpuReading {
  readonly index: number;
  readonly name: string;
  readonly totalMb: number;
  readonly freeMb: number;
  readonly utilizationPct: number | null;
  /** PCI bus id as NVML writes it (`00000000:19:00.0`), null when unknown; the key that matches llama.cpp's CUDA numbering. */
  readonly busId: string | null;
  readonly uuid: string | null;
  readonly source: 'nvml' | 'nvidia-smi';
  /** Peak memory bandwidth (GB/s): bus width × the memory's top clock (NVML only; absent where it cannot tell). */
  readonly memGBps?: number;
}

type Fn = (...args: unknown[]) => number;
interface Nvml {
  init: Fn;
  count: Fn;
  handle: Fn;
  memory: Fn;
  util: Fn;
  name: Fn;
  pci: Fn | null;
  uuid: Fn | null;
  /** Compute and graphics process lists (a game is a graphics process); null on a driver without them. */
  procs: { compute: Fn; graphics: Fn } | null;
  /** The memory bus width and top clocks, for the memory's bandwidth; null on a driver without them. */
  bandwidth: { busWidth: Fn; maxClock: Fn } | null;
}

/** nvmlClockType_t's NVML_CLOCK_MEM. */
const NVML_CLOCK_MEM = 2;

/**
 * Pure: a GPU memory's peak bandwidth (GB/s) from its bus width (bits) and NVML's top memory clock (MHz), two
 * transfers per clock as NVML reports clocks for GDDR5/6/6X and HBM alike (GTX 1060: 192 bits × 4004 MHz →
 * 192 GB/s; RTX 4070 SUPER: 192 × 10501 → 504; H100 SXM: 5120 × 2619 → 3352). Undefined where either is unknown.
 */
export function memoryBandwidthGBps(busWidthBits: number, memClockMhz: number): number | undefined {
  if (!(busWidthBits > 0) || !(memClockMhz > 0) || !Number.isFinite(busWidthBits * memClockMhz)) return undefined;
  return ((busWidthBits / 8) * memClockMhz * 2) / 1000;
}

/**
 * The NVML structs relay reads, as koffi types. Fixed widths only: nvml.h uses `unsigned int` (32-bit) and
 * `unsigned long long` (64-bit), the same on Linux (LP64) and Windows (LLP64), and never a C `long` (which
 * Windows makes 32-bit). test/unit/gpu-windows.test.ts checks the sizes and offsets against nvml.h.
 */
export const NVML_STRUCTS = {
  nvmlMemory_t: { total: 'uint64', free: 'uint64', used: 'uint64' },
  nvmlUtilization_t: { gpu: 'uint32', memory: 'uint32' },
  nvmlPciInfo_t: {
    busIdLegacy: ['char', 16],
    domain: 'uint32',
    bus: 'uint32',
    device: 'uint32',
    pciDeviceId: 'uint32',
    pciSubSystemId: 'uint32',
    busId: ['char', 32],
  },
  /** nvmlProcessInfo_v2_t, what the _v3 process lists fill. */
  nvmlProcessInfo_t: { pid: 'uint32', usedGpuMemory: 'uint64', gpuInstanceId: 'uint32', computeInstanceId: 'uint32' },
} as const satisfies Record<string, Record<string, string | readonly [string, number]>>;

type KoffiLib = ReturnType<typeof import('koffi').load>;

/** koffi's struct type for one of NVML_STRUCTS; `name` registers it under that name, anonymous without. */
export function nvmlStruct(koffi: typeof import('koffi'), which: keyof typeof NVML_STRUCTS, name?: string): unknown {
  const fields = Object.fromEntries(Object.entries(NVML_STRUCTS[which]).map(([k, v]) => [k, typeof v === 'string' ? v : koffi.array(v[0], v[1])]));
  return name === undefined ? koffi.struct(fields) : koffi.struct(name, fields);
}

/** The first of `candidates` that loads (a full path is checked for first, so a missing file costs no loader search), or null. */
export function loadFirst(koffi: { load(path: string): KoffiLib }, candidates: readonly string[], exists: (p: string) => boolean = existsSync): KoffiLib | null {
  for (const c of candidates) {
    if (isFullPath(c) && !exists(c)) continue;
    try {
      return koffi.load(c);
    } catch {
      /* not this one: the next */
    }
  }
  return null;
}

let cached: Nvml | null | undefined;

function load(): Nvml | null {
  if (cached !== undefined) return cached;
  cached = null;
  try {
    const koffi = requireNative<typeof import('koffi')>('koffi');
    const lib = loadFirst(koffi, nvmlCandidates(process.platform, processEnv()));
    if (!lib) return cached;
    nvmlStruct(koffi, 'nvmlMemory_t', 'nvmlMemory_t');
    nvmlStruct(koffi, 'nvmlUtilization_t', 'nvmlUtilization_t');
    cached = {
      init: lib.func('int nvmlInit_v2()') as Fn,
      count: lib.func('int nvmlDeviceGetCount_v2(_Out_ uint32 *count)') as Fn,
      handle: lib.func('int nvmlDeviceGetHandleByIndex_v2(uint32 index, _Out_ void **device)') as Fn,
      memory: lib.func('int nvmlDeviceGetMemoryInfo(void *device, _Out_ nvmlMemory_t *memory)') as Fn,
      util: lib.func('int nvmlDeviceGetUtilizationRates(void *device, _Out_ nvmlUtilization_t *util)') as Fn,
      name: lib.func('int nvmlDeviceGetName(void *device, _Out_ char *name, uint32 length)') as Fn,
      pci: null,
      uuid: null,
      procs: null,
      bandwidth: null,
    };
    try {
      nvmlStruct(koffi, 'nvmlPciInfo_t', 'nvmlPciInfo_t');
      cached.pci = lib.func('int nvmlDeviceGetPciInfo_v3(void *device, _Out_ nvmlPciInfo_t *pci)') as Fn;
      cached.uuid = lib.func('int nvmlDeviceGetUUID(void *device, _Out_ char *uuid, uint32 length)') as Fn;
    } catch {
      /* an old driver: devices are matched by order */
    }
    try {
      nvmlStruct(koffi, 'nvmlProcessInfo_t', 'nvmlProcessInfo_t');
      const sig = '(void *device, _Inout_ uint32 *count, _Out_ nvmlProcessInfo_t *infos)';
      cached.procs = {
        compute: lib.func(`int nvmlDeviceGetComputeRunningProcesses_v3${sig}`) as Fn,
        graphics: lib.func(`int nvmlDeviceGetGraphicsRunningProcesses_v3${sig}`) as Fn,
      };
    } catch {
      cached.procs = null; // an old driver: auto-pause says it is unavailable
    }
    try {
      cached.bandwidth = {
        busWidth: lib.func('int nvmlDeviceGetMemoryBusWidth(void *device, _Out_ uint32 *busWidth)') as Fn,
        maxClock: lib.func('int nvmlDeviceGetMaxClockInfo(void *device, int type, _Out_ uint32 *clock)') as Fn,
      };
    } catch {
      cached.bandwidth = null; // an old driver: devices start from their kind's default speed
    }
  } catch {
    cached = null; // no driver: the normal case on a CPU-only machine
  }
  return cached;
}

export function nvmlAvailable(): boolean {
  return load() !== null;
}

let initialised: boolean | undefined;

/**
 * NVML initialised once for the life of the process (an init can take tens of milliseconds on the event loop;
 * each reading after it is a few driver queries). Null when the library or the driver is not there.
 */
function session(): Nvml | null {
  const n = load();
  if (!n) return null;
  initialised ??= n.init() === 0;
  return initialised ? n : null;
}

/** Whether the opt-in auto-pause detector can see other programs' GPU use here, and why not. */
export function autoPauseSupport(): { available: boolean; why: string } {
  const n = load();
  return autoPauseWhy(!n ? 'absent' : n.procs ? 'ready' : 'no-process-lists', process.platform);
}

/** Pure: auto-pause's availability line for what NVML load() found on `platform`. */
export function autoPauseWhy(nvml: 'absent' | 'no-process-lists' | 'ready', platform: NodeJS.Platform): { available: boolean; why: string } {
  if (nvml === 'absent') return { available: false, why: `NVIDIA's NVML (${nvmlName(platform)}) is not here: auto-pause sees processes on NVIDIA GPUs only` };
  if (nvml === 'no-process-lists') return { available: false, why: 'this NVIDIA driver has no process lists (nvmlDeviceGet*RunningProcesses_v3)' };
  return { available: true, why: 'NVML lists compute and graphics processes (games included)' };
}

function cString(buf: unknown): string | null {
  if (typeof buf === 'string') return buf.replace(/\0.*$/s, '') || null;
  if (Array.isArray(buf)) return String.fromCharCode(...(buf as number[]).filter((c) => c !== 0)) || null;
  return null;
}

const MIB = 1024 * 1024;

/** Each GPU's memory bandwidth by NVML index, read once: it does not change while relay runs. */
const bandwidths = new Map<number, number | undefined>();

function readBandwidth(n: Nvml, index: number, device: unknown): number | undefined {
  if (!n.bandwidth) return undefined;
  if (!bandwidths.has(index)) {
    const bus = [0];
    const clock = [0];
    const ok = n.bandwidth.busWidth(device, bus) === 0 && n.bandwidth.maxClock(device, NVML_CLOCK_MEM, clock) === 0;
    bandwidths.set(index, ok ? memoryBandwidthGBps(bus[0]!, clock[0]!) : undefined);
  }
  return bandwidths.get(index);
}

/** One reading per NVIDIA GPU, or null when NVML cannot be used here. */
export function readNvml(): GpuReading[] | null {
  const n = session();
  if (!n) return null;
  const count = [0];
  if (n.count(count) !== 0) return null;
  const out: GpuReading[] = [];
  for (let i = 0; i < count[0]!; i++) {
    const h = [null];
    if (n.handle(i, h) !== 0) continue;
    const mem = { total: 0n, free: 0n, used: 0n } as Record<string, bigint | number>;
    if (n.memory(h[0], mem) !== 0) continue;
    const util = { gpu: 0, memory: 0 } as Record<string, number>;
    const utilOk = n.util(h[0], util) === 0;
    const nameBuf = Buffer.alloc(96);
    n.name(h[0], nameBuf, nameBuf.length);
    let busId: string | null = null;
    let uuid: string | null = null;
    if (n.pci) {
      const pci: Record<string, unknown> = {};
      if (n.pci(h[0], pci) === 0) busId = cString(pci.busId);
    }
    if (n.uuid) {
      const u = Buffer.alloc(96);
      if (n.uuid(h[0], u, u.length) === 0) uuid = u.toString('utf8').replace(/\0.*$/s, '') || null;
    }
    const memGBps = readBandwidth(n, i, h[0]);
    out.push({
      ...(memGBps ? { memGBps } : {}),
      index: i,
      name: nameBuf.toString('utf8').replace(/\0.*$/s, ''),
      totalMb: Math.floor(Number(mem.total) / MIB),
      freeMb: Math.floor(Number(mem.free) / MIB),
      utilizationPct: utilOk ? (util.gpu ?? null) : null,
      busId,
      uuid,
      source: 'nvml',
    });
  }
  return out;
}

/**
 * GPU memory (MB) used by other programs' processes, compute and graphics (a game draws; a CUDA app computes),
 * summed over every GPU, or null when NVML cannot tell. A process on both lists counts once. `ownPids` are
 * relay's own children (llama-server, ggml-rpc-server). The auto-pause detector's input.
 */
export function otherProcessesGpuMb(ownPids: ReadonlySet<number>): number | null {
  const n = session();
  if (!n?.procs) return null;
  const count = [0];
  if (n.count(count) !== 0) return null;
  const perDevice: { pid: number; mb: number }[][] = [];
  for (let i = 0; i < count[0]!; i++) {
    const h = [null];
    if (n.handle(i, h) !== 0) continue;
    const procs: { pid: number; mb: number }[] = [];
    for (const list of [n.procs.compute, n.procs.graphics]) {
      const cap = [64];
      const infos = Array.from({ length: 64 }, () => ({ pid: 0, usedGpuMemory: 0n, gpuInstanceId: 0, computeInstanceId: 0 }));
      if (list(h[0], cap, infos) !== 0) continue;
      for (const p of infos.slice(0, cap[0])) procs.push({ pid: p.pid, mb: Number(p.usedGpuMemory) / MIB });
    }
    perDevice.push(procs);
  }
  return otherProcessesMb(perDevice, ownPids);
}

/**
 * Pure: per device, the processes NVML listed (compute and graphics lists concatenated) → MB used by
 * processes that are not relay's. NVML reports an unknown amount (e.g. a graphics process under WDDM) as
 * 2^64-1, which counts as 1 MB: the process is there, its size is not.
 */
export function otherProcessesMb(perDevice: readonly (readonly { pid: number; mb: number }[])[], ownPids: ReadonlySet<number>): number {
  let total = 0;
  for (const procs of perDevice) {
    const seen = new Set<number>();
    for (const p of procs) {
      if (ownPids.has(p.pid) || seen.has(p.pid)) continue;
      seen.add(p.pid);
      total += Number.isFinite(p.mb) && p.mb < 1 << 30 ? p.mb : 1;
    }
  }
  return total;
}
