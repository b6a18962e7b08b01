import { spawnSync } from 'node:child_process';
import { parseListDevices, type ListedDevice } from '../llama/devices.js';
import { readNvml, type GpuReading } from './nvml.js';
import { readNvidiaSmi } from './smi.js';

/**
 * A device the hub may place on. GPUs come from `llama-server --list-devices` (the names llama.cpp accepts in
 * --device), with free memory and utilisation from NVML (or nvidia-smi) where NVIDIA's driver is present.
 * A machine without a GPU has no device unless its owner opted a CPU budget in.
 */
export interface Device {
  /** llama.cpp device name (CUDA0, Vulkan0, …) or `CPU` for the opted-in CPU budget. */
  readonly id: string;
  readonly kind: 'gpu' | 'cpu';
  readonly description: string;
  readonly totalMb: number;
  /** Free as reported by the driver (GPU) or the whole budget (CPU); reservations are subtracted by the scheduler. */
  readonly reportedFreeMb: number;
  readonly utilizationPct: number | null;
  readonly source: 'nvml' | 'nvidia-smi' | 'llama-server' | 'cpu-budget';
}

/** Pure: merge llama-server's list with driver readings (CUDA devices are numbered like NVML's indices). */
export function mergeDevices(listed: readonly ListedDevice[], readings: readonly GpuReading[] | null, cpuBudgetMb: number): Device[] {
  const out: Device[] = [];
  for (const d of listed) {
    if (d.name.startsWith('RPC')) continue; // remote devices belong to shards, not the host inventory
    const cuda = /^CUDA(\d+)$/.exec(d.name);
    const r = cuda && readings ? readings.find((x) => x.index === Number(cuda[1])) : undefined;
    out.push({
      id: d.name,
      kind: 'gpu',
      description: d.description,
      totalMb: r?.totalMb ?? d.totalMib,
      reportedFreeMb: r?.freeMb ?? d.freeMib,
      utilizationPct: r?.utilizationPct ?? null,
      source: r?.source ?? 'llama-server',
    });
  }
  if (cpuBudgetMb > 0) {
    out.push({ id: 'CPU', kind: 'cpu', description: `CPU (opted-in budget of ${cpuBudgetMb} MB)`, totalMb: cpuBudgetMb, reportedFreeMb: cpuBudgetMb, utilizationPct: null, source: 'cpu-budget' });
  }
  return out;
}

export function listLlamaDevices(serverPath: string): ListedDevice[] {
  const r = spawnSync(serverPath, ['--list-devices'], { encoding: 'utf8', timeout: 30_000 });
  return parseListDevices(`${r.stdout ?? ''}${r.stderr ?? ''}`);
}

export function readGpuReadings(): GpuReading[] | null {
  return readNvml() ?? readNvidiaSmi();
}

/**
 * The host's devices. `--list-devices` is read once (it loads the backends), driver readings on every call.
 */
export class HostInventory {
  private listed: ListedDevice[] | null = null;

  constructor(
    private readonly serverPath: string,
    private readonly cpuBudgetMb: number,
    private readonly readings: () => GpuReading[] | null = readGpuReadings,
  ) {}

  devices(): Device[] {
    this.listed ??= listLlamaDevices(this.serverPath);
    const hasGpu = this.listed.some((d) => !d.name.startsWith('RPC'));
    return mergeDevices(this.listed, hasGpu ? this.readings() : null, this.cpuBudgetMb);
  }
}
