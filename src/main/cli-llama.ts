import { parseArgs } from 'node:util';
import { autoPauseSupport } from './core/gpu/nvml.js';
import { packageVersion } from './core/hub/index.js';
import { BACKEND_CHOICES, GPU_BACKENDS, buildBackendModule, chooseBackend, ensureLlama, findLlama, modulesIn, probeMachine, type BackendChoice, type GpuBackend } from './core/llama/index.js';
import { buildWindows } from './core/llama/build-windows.js';
import { doctorLines } from './core/llama/doctor.js';
import { llamaBuildProgress, TerminalProgress } from './terminal-progress.js';

/** `relay llama build` and `relay doctor`: the binaries, the GPU backend and what the machine has. */

export function backendOf(v: string | undefined): BackendChoice | undefined {
  if (v === undefined) return undefined;
  if (!(BACKEND_CHOICES as readonly string[]).includes(v)) throw new Error(`unknown backend "${v}" (one of ${BACKEND_CHOICES.join(', ')})`);
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
  if (gpu !== null && !(GPU_BACKENDS as readonly string[]).includes(gpu)) throw new Error(`unknown backend "${gpu}" (one of cpu, ${GPU_BACKENDS.join(', ')})`);
  if (gpu) console.log(`${gpu} module      ${await buildBackendModule(gpu as GpuBackend, { progress })}`);
  const install = await ensureLlama({ backend: 'cpu', progress });
  console.log(`llama-server     ${install.serverPath}`);
  console.log(`ggml-rpc-server  ${install.rpcServerPath}`);
  console.log(`llama.cpp        ${install.tag} (${install.version})`);
  return 0;
}

export async function cmdDoctor(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { backend: { type: 'string' } } });
  const base = findLlama();
  console.log(`relay            ${packageVersion()} (node ${process.version}, ${process.platform}-${process.arch})`);
  if (!base) {
    console.log('llama.cpp        not built: run `npx relay llama build` (or set RELAY_LLAMA_BIN_DIR)');
    return 1;
  }
  const probe = probeMachine(modulesIn(base.modulesDir));
  const { install, resolution } = await chooseBackend(base, { choice: backendOf(values.backend), progress: (l) => console.error(`[llama] ${l}`) });
  for (const l of doctorLines(install, resolution, probe, autoPauseSupport())) console.log(l);
  return 0;
}
