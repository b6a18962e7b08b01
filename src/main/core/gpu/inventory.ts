import { spawn } from 'node:child_process';
import { parseListDevices, type ListedDevice } from '../llama/devices.js';
import { installEnv, type LlamaInstall } from '../llama/install.js';
import { trackChild } from '../llama/supervisor.js';
import { readNvml, type GpuReading } from './nvml.js';
import { readNvidiaSmi } from './smi.js';

/**
 * A device the hub may place on. GPUs come from `llama-server --list-devices` with the backend in use (the
 * names llama.cpp accepts in --device), re-read in the background so free memory follows what other programs
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
  /** Its memory's peak bandwidth (GB/s) where the driver tells it (NVML): a never-measured device's speed comes from it. */
  readonly memGBps?: number;
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

/** Pure: merge llama-server's list with driver readings (`readingsAt`: when the driver was read). */
export function mergeDevices(
  listed: readonly ListedDevice[],
  readings: readonly GpuReading[] | null,
  cpuBudgetMb: number,
  opts: { cudaVisible?: string | undefined; readAt?: number; readingsAt?: number } = {},
): Device[] {
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
      ...(r?.memGBps ? { memGBps: r.memGBps } : {}),
      // A driver reading is at most a second old; llama-server's list is as old as its last refresh.
      readAt: r ? (opts.readingsAt ?? readAt) : readAt,
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

/** NVML (initialised once, then each reading is a few driver queries), else nvidia-smi in the background. */
export async function readGpuReadings(): Promise<GpuReading[] | null> {
  return readNvml() ?? (await readNvidiaSmi());
}

/** `--list-devices` without blocking the event loop (a Vulkan instance takes a while to come up). */
function listAsync(install: LlamaInstall): Promise<ListedDevice[] | null> {
  return new Promise((resolve) => {
    const child = spawn(install.serverPath, ['--list-devices'], { env: installEnv(install), stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true });
    trackChild(child);
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

export interface InventoryOptions {
  /** llama-server's device list (default: `--list-devices` with the install's backend). */
  readonly list?: () => Promise<ListedDevice[] | null>;
  /** Driver readings of NVIDIA GPUs (default: NVML, else nvidia-smi). */
  readonly read?: () => Promise<GpuReading[] | null>;
  /** How often devices no driver reading covers are listed again (0: never). */
  readonly listMs?: number;
  /** How often the driver is read (0: only at start). */
  readonly readMs?: number;
  readonly now?: () => number;
}

/**
 * The host machine's devices. Nothing is read on the caller's path: `start()` lists them once, then timers keep
 * the picture fresh in the background — driver readings every second (free memory and utilisation of NVIDIA
 * GPUs), llama-server's list every few seconds for GPUs no driver covers (each --list-devices opens a context on
 * every GPU: memory, power, and a process auto-pause would have to ignore). `devices()` only merges what was
 * read last, so the scheduler, /status and /v1/models may call it as often as they like.
 */
export class HostInventory {
  private listed: ListedDevice[] = [];
  private listedAt = 0;
  private readings: GpuReading[] | null = null;
  private readingsAt = 0;
  private readonly timers: NodeJS.Timeout[] = [];
  private refreshing: Promise<void> | null = null;
  private reading: Promise<void> | null = null;
  private started: Promise<void> | null = null;
  private lastMerged: Device[] = [];
  private readonly list: () => Promise<ListedDevice[] | null>;
  private readonly read: () => Promise<GpuReading[] | null>;
  private readonly now: () => number;
  private readonly cudaVisible: string | undefined;

  constructor(
    install: LlamaInstall,
    private cpuBudgetMb: number,
    private readonly opts: InventoryOptions = {},
  ) {
    this.list = opts.list ?? (() => listAsync(install));
    this.read = opts.read ?? readGpuReadings;
    this.now = opts.now ?? Date.now;
    // CUDA numbers the GPUs llama-server can see: CUDA_VISIBLE_DEVICES as its environment has it.
    this.cudaVisible = installEnv(install).CUDA_VISIBLE_DEVICES;
    this.merge();
  }

  /** The first listing and driver reading, then the background refreshes. Idempotent. */
  start(): Promise<void> {
    this.started ??= (async () => {
      await this.refresh();
      if (this.listed.length === 0) return;
      await this.readDriver();
      const listMs = this.opts.listMs ?? 5000;
      const readMs = this.opts.readMs ?? 1000;
      if (listMs > 0) {
        this.timers.push(
          setInterval(() => {
            if (this.lastMerged.some((d) => d.kind === 'gpu' && d.source === 'llama-server')) void this.refresh();
          }, listMs),
        );
      }
      if (readMs > 0) this.timers.push(setInterval(() => void this.readDriver(), readMs));
      for (const t of this.timers) t.unref();
    })();
    return this.started;
  }

  /** What was read last, merged (no I/O: safe on every request). */
  devices(): Device[] {
    return this.lastMerged;
  }

  private merge(): void {
    this.lastMerged = mergeDevices(this.listed, this.listed.length > 0 ? this.readings : null, this.cpuBudgetMb, {
      cudaVisible: this.cudaVisible,
      readAt: this.listedAt,
      readingsAt: this.readingsAt,
    });
  }

  /** The opted-in CPU budget (MiB, 0: GPUs only) now. */
  get cpuBudget(): number {
    return this.cpuBudgetMb;
  }

  /** Change the CPU budget at once (the tray's settings): the next devices() reports it. */
  setCpuBudgetMb(mb: number): void {
    this.cpuBudgetMb = mb;
    this.merge();
  }

  /** Re-read llama-server's list now (free memory of devices NVML does not cover). */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const at = this.now();
        const fresh = await this.list();
        if (fresh) {
          this.listed = fresh;
          this.listedAt = at;
          this.merge();
        }
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  private readDriver(): Promise<void> {
    this.reading ??= (async () => {
      try {
        const at = this.now();
        this.readings = await this.read();
        this.readingsAt = at;
        this.merge();
      } catch {
        /* a failed reading keeps the last one */
      } finally {
        this.reading = null;
      }
    })();
    return this.reading;
  }

  close(): void {
    for (const t of this.timers.splice(0)) clearInterval(t);
  }
}
