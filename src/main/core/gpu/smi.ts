import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { processEnv } from '../config.js';
import { firstPresent, nvidiaSmiCandidates } from './names.js';
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

/** The nvidia-smi to run on `platform` (names.ts's candidates: the first present), or null when there is none. */
export function nvidiaSmiCommand(platform: NodeJS.Platform = process.platform, env: NodeJS.ProcessEnv = processEnv(), exists: (p: string) => boolean = existsSync): string | null {
  return firstPresent(nvidiaSmiCandidates(platform, env), exists);
}

/** One reading through nvidia-smi, in the background (a child process, never a synchronous spawn). */
export function readNvidiaSmi(): Promise<GpuReading[] | null> {
  const smi = nvidiaSmiCommand();
  if (!smi) return Promise.resolve(null);
  return new Promise((resolve) => {
    execFile(smi, NVIDIA_SMI_ARGS, { encoding: 'utf8', timeout: 10_000, windowsHide: true }, (err, stdout) => {
      resolve(err || !stdout ? null : parseNvidiaSmi(stdout));
    });
  });
}
