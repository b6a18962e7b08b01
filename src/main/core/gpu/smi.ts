import { execFile } from 'node:child_process';
import type { GpuReading } from './nvml.js';

export const NVIDIA_SMI_ARGS = ['--query-gpu=index,name,memory.total,memory.free,utilization.gpu,pci.bus_id,uuid', '--format=csv,noheader,nounits'];

/** Parse `nvidia-smi --query-gpu=index,name,memory.total,memory.free,utilization.gpu[,pci.bus_id,uuid] --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(text: string): GpuReading[] {
  const out: GpuReading[] = [];
  for (const line of text.split(/\r?\n/)) {
    const parts = line.split(',').map((p) => p.trim());
    if (parts.length < 5) continue;
    const [index, name, total, free, util, busId, uuid] = parts;
    const i = Number(index);
    const t = Number(total);
    const f = Number(free);
    if (!Number.isInteger(i) || !Number.isFinite(t) || !Number.isFinite(f)) continue;
    const u = Number(util);
    out.push({
      index: i,
      name: name!,
      totalMb: t,
      freeMb: f,
      utilizationPct: Number.isFinite(u) ? u : null,
      busId: busId && /^[0-9a-f]+:[0-9a-f]+:[0-9a-f]+\.[0-9a-f]$/i.test(busId) ? busId : null,
      uuid: uuid && uuid.startsWith('GPU-') ? uuid : null,
      source: 'nvidia-smi',
    });
  }
  return out;
}

/** One reading through nvidia-smi, in the background (a child process, never a synchronous spawn). */
export function readNvidiaSmi(): Promise<GpuReading[] | null> {
  return new Promise((resolve) => {
    execFile('nvidia-smi', NVIDIA_SMI_ARGS, { encoding: 'utf8', timeout: 10_000, windowsHide: true }, (err, stdout) => {
      resolve(err || !stdout ? null : parseNvidiaSmi(stdout));
    });
  });
}
