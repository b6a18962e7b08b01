import { UsageError } from './usage.js';
import { parseArgs } from 'node:util';
import { autoPauseSupport } from '../core/gpu/nvml.js';
import { packageVersion } from '../core/hub/index.js';
import {
  BACKEND_CHOICES,
  GPU_BACKENDS,
  buildBackendModule,
  chooseBackend,
  ensureLlama,
  findLlama,
  modulesIn,
  probeMachine,
  type BackendChoice,
  type GpuBackend,
  type LlamaInstall,
} from '../core/llama/index.js';
import type { Logger } from '../core/log.js';
import { readSettings } from '../core/node/link/settings.js';
import { nodeHomeDir } from '../core/config.js';
import { buildWindows } from '../core/llama/build-windows.js';
import { doctorLines } from '../core/llama/doctor.js';
import { llamaBuildProgress, TerminalProgress } from './progress.js';

/** `relay llama build` and `relay doctor`: the binaries, the GPU backend and what the machine has. */

const SOURCES: Record<LlamaInstall['source'], string> = {
  shipped: 'llama.cpp shipped with relay (nothing is built on this machine)',
  cache: 'llama.cpp built on this machine from the pinned source',
  env: 'llama.cpp from RELAY_LLAMA_BIN_DIR',
};

/** The two lines `relay hub` and `relay up` log at start: which llama.cpp, and which backend and why. */
export function logInstall(log: Logger, install: LlamaInstall): void {
  log.info({ llama: install.binDir, version: install.version, source: install.source }, SOURCES[install.source]);
  log.info({ backend: install.backend, module: install.backendModule }, install.backendReason);
}

export function backendOf(v: string | undefined): BackendChoice | undefined {
  if (v === undefined) return undefined;
  if (!(BACKEND_CHOICES as readonly string[]).includes(v)) throw new UsageError(`unknown backend "${v}" (one of ${BACKEND_CHOICES.join(', ')})`);
  return v as BackendChoice;
}

export async function cmdLlamaBuild(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { backend: { type: 'string' }, windows: { type: 'boolean' } } });
  const progress = llamaBuildProgress(new TerminalProgress(process.stderr, (l) => console.error(l)));
  if (values.windows) {
    // Cross-built here for a Windows node or the Windows app (npm run dist -- --win): never on the Windows PC.
    console.log(`windows x64      ${await buildWindows({ progress })}`);
    return 0;
  }
  const gpu = values.backend === undefined || values.backend === 'cpu' ? null : values.backend;
  if (gpu !== null && !(GPU_BACKENDS as readonly string[]).includes(gpu)) throw new UsageError(`unknown backend "${gpu}" (one of cpu, ${GPU_BACKENDS.join(', ')})`);
  if (gpu) console.log(`${gpu} module      ${await buildBackendModule(gpu as GpuBackend, { progress })}`);
  const install = await ensureLlama({ backend: 'cpu', progress });
  console.log(`llama-server     ${install.serverPath}`);
  console.log(`ggml-rpc-server  ${install.rpcServerPath}`);
  console.log(`llama.cpp        ${install.tag} (${install.version})`);
  return 0;
}

export async function cmdDoctor(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { backend: { type: 'string' }, home: { type: 'string' } } });
  const choice = backendOf(values.backend);
  const base = findLlama();
  console.log(`relay            ${packageVersion()} (node ${process.version}, ${process.platform}-${process.arch})`);
  if (!base) {
    console.log('llama.cpp        not built: run `relay llama build` (or set RELAY_LLAMA_BIN_DIR; the portable release ships it built)');
    return 1;
  }
  // Only the cache holds modules built here; a release's or an app's llama/backends/ holds shipped ones (listed below).
  const probe = probeMachine(base.source === 'cache' ? modulesIn(base.modulesDir) : {});
  const { install, resolution } = await chooseBackend(base, { choice, progress: (l) => console.error(`[llama] ${l}`) });
  // A node's budget is what `relay up` saved for it (its --home, else the default node home).
  const cpuBudgetMb = readSettings(nodeHomeDir(values.home))?.cpuBudgetMb ?? 0;
  for (const l of doctorLines(install, resolution, probe, autoPauseSupport(), cpuBudgetMb)) console.log(l);
  return 0;
}
