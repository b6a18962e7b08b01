import { createRequire } from 'node:module';

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
  readonly source: 'nvml' | 'nvidia-smi';
}

type Fn = (...args: unknown[]) => number;
interface Nvml {
  init: Fn; shutdown: Fn; count: Fn; handle: Fn; memory: Fn; util: Fn; name: Fn; procs: Fn | null;
}

let cached: Nvml | null | undefined;

function load(): Nvml | null {
  if (cached !== undefined) return cached;
  cached = null;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const lib = koffi.load(process.platform === 'win32' ? 'nvml.dll' : 'libnvidia-ml.so.1');
    koffi.struct('nvmlMemory_t', { total: 'uint64', free: 'uint64', used: 'uint64' });
    koffi.struct('nvmlUtilization_t', { gpu: 'uint32', memory: 'uint32' });
    cached = {
      init: lib.func('int nvmlInit_v2()') as Fn,
      shutdown: lib.func('int nvmlShutdown()') as Fn,
      count: lib.func('int nvmlDeviceGetCount_v2(_Out_ uint32 *count)') as Fn,
      handle: lib.func('int nvmlDeviceGetHandleByIndex_v2(uint32 index, _Out_ void **device)') as Fn,
      memory: lib.func('int nvmlDeviceGetMemoryInfo(void *device, _Out_ nvmlMemory_t *memory)') as Fn,
      util: lib.func('int nvmlDeviceGetUtilizationRates(void *device, _Out_ nvmlUtilization_t *util)') as Fn,
      name: lib.func('int nvmlDeviceGetName(void *device, _Out_ char *name, uint32 length)') as Fn,
      procs: null,
    };
    try {
      koffi.struct('nvmlProcessInfo_t', { pid: 'uint32', usedGpuMemory: 'uint64', gpuInstanceId: 'uint32', computeInstanceId: 'uint32' });
      cached.procs = lib.func('int nvmlDeviceGetComputeRunningProcesses_v3(void *device, _Inout_ uint32 *count, _Out_ nvmlProcessInfo_t *infos)') as Fn;
    } catch {
      cached.procs = null; // an old driver: auto-pause falls back to "unavailable"
    }
  } catch {
    cached = null; // no driver: the normal case on a CPU-only machine
  }
  return cached;
}

export function nvmlAvailable(): boolean {
  return load() !== null;
}

const MIB = 1024 * 1024;

/** One reading per NVIDIA GPU, or null when NVML cannot be used here. */
export function readNvml(): GpuReading[] | null {
  const n = load();
  if (!n || n.init() !== 0) return null;
  try {
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
      out.push({
        index: i,
        name: nameBuf.toString('utf8').replace(/\0.*$/s, ''),
        totalMb: Math.floor(Number(mem.total) / MIB),
        freeMb: Math.floor(Number(mem.free) / MIB),
        utilizationPct: utilOk ? (util.gpu ?? null) : null,
        source: 'nvml',
      });
    }
    return out;
  } finally {
    n.shutdown();
  }
}

/**
 * GPU memory (MB) used by compute processes other than `ownPids`, summed over every GPU, or null when NVML
 * cannot tell. The auto-pause detector's input.
 */
export function otherProcessesGpuMb(ownPids: ReadonlySet<number>): number | null {
  const n = load();
  if (!n?.procs || n.init() !== 0) return null;
  try {
    const count = [0];
    if (n.count(count) !== 0) return null;
    let total = 0;
    for (let i = 0; i < count[0]!; i++) {
      const h = [null];
      if (n.handle(i, h) !== 0) continue;
      const cap = [64];
      const infos = Array.from({ length: 64 }, () => ({ pid: 0, usedGpuMemory: 0n, gpuInstanceId: 0, computeInstanceId: 0 }));
      if (n.procs(h[0], cap, infos) !== 0) continue;
      for (const p of infos.slice(0, cap[0])) {
        if (!ownPids.has(p.pid)) total += Number(p.usedGpuMemory) / MIB;
      }
    }
    return total;
  } finally {
    n.shutdown();
  }
}
