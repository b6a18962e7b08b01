import { spawn } from 'node:child_process';
import { parseListDevices, type ListedDevice } from '../llama/devices.js';
import { listDevicesWith } from '../llama/backends.js';
import { installEnv, type LlamaInstall } from '../llama/install.js';
import { readNvml, type GpuReading } from './nvml.js';
import { readNvidiaSmi } from './smi.js';

/**
 * A device the hub may place on. GPUs come from `llama-server --list-devices` with the backend in use (the
 * names llama.cpp accepts in --device), re-read every few seconds so free memory follows what other programs
 * and relay's own children hold. NVIDIA GPUs are enriched by NVML (or nvidia-smi): free memory and
 * utilisation, matched to the llama.cpp device by PCI bus id (CUDA) or by name (Vulkan), never by position
 * alone. A machine without a GPU has no device unless its owner opted a CPU budget in.
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
  /** The NVIDIA GPU this device was matched to (PCI bus id), when one was. */
  readonly busId: string | null;
  /** When `reportedFreeMb` was read (ms since the epoch): replicas that became ready later are not in it yet. */
  readonly readAt: number;
}

/** `00000000:19:00.0` and `0000:19:00.0` name one bus id: compare without the domain's leading zeros. */
export function normalizeBusId(id: string): string {
  const m = /^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\.([0-9a-f])$/i.exec(id.trim());
  if (!m) return id.trim().toLowerCase();
  return `${parseInt(m[1]!, 16).toString(16)}:${m[2]!.toLowerCase().padStart(2, '0')}:${m[3]!.toLowerCase().padStart(2, '0')}.${m[4]!.toLowerCase()}`;
}

/**
 * Pure: the reading that is llama.cpp's device `d`. relay starts every CUDA child with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA<i> is the i-th *visible* GPU in PCI bus order; CUDA_VISIBLE_DEVICES
 * (indices in that order, or GPU-UUID prefixes) says which are visible. A Vulkan device is the one NVIDIA GPU
 * with its name, or none when several share it (then llama.cpp's own numbers stand).
 */
export function matchReading(d: ListedDevice, readings: readonly GpuReading[], cudaVisible?: string): GpuReading | undefined {
  const cuda = /^CUDA(\d+)$/.exec(d.name);
  if (cuda) {
    const byBus = [...readings].sort((a, b) => (a.busId && b.busId ? normalizeBusId(a.busId).localeCompare(normalizeBusId(b.busId)) : a.index - b.index));
    let visible: (GpuReading | undefined)[] = byBus;
    if (cudaVisible !== undefined && cudaVisible.trim() !== '') {
      visible = cudaVisible
        .split(',')
        .map((e) => e.trim())
        .map((e) => (/^\d+$/.test(e) ? byBus[Number(e)] : byBus.find((r) => r.uuid !== null && e.startsWith('GPU-') && r.uuid.startsWith(e))));
    }
    return visible[Number(cuda[1])];
  }
  if (/^Vulkan\d+$/.test(d.name)) {
    const same = readings.filter((r) => r.name === d.description);
    return same.length === 1 ? same[0] : undefined;
  }
  return undefined;
}

/** Pure: merge llama-server's list with driver readings. */
export function mergeDevices(listed: readonly ListedDevice[], readings: readonly GpuReading[] | null, cpuBudgetMb: number, opts: { cudaVisible?: string | undefined; readAt?: number } = {}): Device[] {
  const out: Device[] = [];
  const readAt = opts.readAt ?? 0;
  for (const d of listed) {
    if (d.name.startsWith('RPC')) continue; // remote devices belong to shards, not the host inventory
    const r = readings ? matchReading(d, readings, opts.cudaVisible) : undefined;
    out.push({
      id: d.name,
      kind: 'gpu',
      description: d.description,
      totalMb: r?.totalMb ?? d.totalMib,
      reportedFreeMb: r?.freeMb ?? d.freeMib,
      utilizationPct: r?.utilizationPct ?? null,
      source: r?.source ?? 'llama-server',
      busId: r?.busId ?? null,
      // A driver reading is taken now; llama-server's list when it was last refreshed.
      readAt: r ? Number.MAX_SAFE_INTEGER : readAt,
    });
  }
  if (cpuBudgetMb > 0) {
    out.push({
      id: 'CPU',
      kind: 'cpu',
      description: `CPU (opted-in budget of ${cpuBudgetMb} MB)`,
      totalMb: cpuBudgetMb,
      reportedFreeMb: cpuBudgetMb,
      utilizationPct: null,
      source: 'cpu-budget',
      busId: null,
      readAt: Number.MAX_SAFE_INTEGER,
    });
  }
  return out;
}

export function readGpuReadings(): GpuReading[] | null {
  return readNvml() ?? readNvidiaSmi();
}

/** `--list-devices` without blocking the event loop (a Vulkan instance takes a while to come up). */
function listAsync(install: LlamaInstall): Promise<ListedDevice[] | null> {
  return new Promise((resolve) => {
    const child = spawn(install.serverPath, ['--list-devices'], { env: installEnv(install), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    timer.unref();
    child.on('error', () => {
      clearTimeout(timer);
      resolve(null);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? parseListDevices(out).filter((d) => !d.name.startsWith('RPC')) : null);
    });
  });
}

/**
 * The host machine's devices: llama-server's list (read at once, then refreshed every `refreshMs` in the
 * background), driver readings on every call.
 */
export class HostInventory {
  private listed: ListedDevice[] | null = null;
  private listedAt = 0;
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  private lastMerged: Device[] = [];

  constructor(
    private readonly install: LlamaInstall,
    private cpuBudgetMb: number,
    private readonly readings: () => GpuReading[] | null = readGpuReadings,
    private readonly refreshMs = 5000,
    private readonly now: () => number = Date.now,
  ) {}

  devices(): Device[] {
    if (this.listed === null) {
      this.listedAt = this.now();
      this.listed = listDevicesWith(this.install.serverPath, this.install.backendModule, installEnv(this.install)).devices;
      if (this.listed.length > 0 && this.refreshMs > 0) {
        // Only devices no driver reading covers need llama-server's list again: each --list-devices opens a
        // context on every GPU (memory, power, and a process auto-pause would have to ignore).
        this.timer = setInterval(() => {
          if (this.lastMerged.some((d) => d.kind === 'gpu' && d.source === 'llama-server')) void this.refresh();
        }, this.refreshMs);
        this.timer.unref();
      }
    }
    const hasGpu = this.listed.length > 0;
    // CUDA numbers the GPUs llama-server can see: CUDA_VISIBLE_DEVICES as its environment has it.
    const cudaVisible = installEnv(this.install).CUDA_VISIBLE_DEVICES;
    this.lastMerged = mergeDevices(this.listed, hasGpu ? this.readings() : null, this.cpuBudgetMb, { cudaVisible, readAt: this.listedAt });
    return this.lastMerged;
  }

  /** The opted-in CPU budget (MiB, 0: GPUs only) now. */
  get cpuBudget(): number {
    return this.cpuBudgetMb;
  }

  /** Change the CPU budget at once (the tray's settings): the next devices() reports it. */
  setCpuBudgetMb(mb: number): void {
    this.cpuBudgetMb = mb;
  }

  /** Re-read llama-server's list now (free memory of devices NVML does not cover). */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const at = this.now();
        const fresh = await listAsync(this.install);
        if (fresh) {
          this.listed = fresh;
          this.listedAt = at;
        }
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
