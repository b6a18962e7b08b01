import { cudaDriverLibrary } from '../gpu/names.js';
import { vulkanLoader, type MachineProbe } from './backend-choice.js';
import type { BackendResolution } from './backends.js';
import type { ListedDevice } from './devices.js';
import type { LlamaInstall } from './install.js';

/**
 * What a node on this machine lends the pool: its GPUs (what --list-devices shows with the chosen backend), RAM on
 * its CPU when its owner opted in (--cpu-budget-mb), or nothing — then the flag that changes that. Pure.
 */
export function lendsLine(gpus: readonly ListedDevice[], cpuBudgetMb: number): { nothing: boolean; line: string } {
  const ram = `${cpuBudgetMb} MB of RAM on its CPU (--cpu-budget-mb)`;
  if (gpus.length > 0) return { nothing: false, line: `${gpus.map((d) => d.name).join(', ')}${cpuBudgetMb > 0 ? ` and ${ram}` : ''}` };
  if (cpuBudgetMb > 0) return { nothing: false, line: `${ram}; no GPU relay can use` };
  return {
    nothing: true,
    line: `nothing: ${LENDS_NOTHING}. To serve from this CPU, start the node with --cpu-budget-mb N (MB of RAM models may use), e.g. \`relay up --cpu-budget-mb 4096\``,
  };
}

/** Why a node lends nothing, in the words `relay up`, `relay doctor` and the hub's 503 share. */
export const LENDS_NOTHING = 'no GPU relay can use and no CPU budget';

/**
 * `relay doctor`'s report, pure: what the machine has, the backend relay uses and why, the devices, what a node
 * here lends (`cpuBudgetMb`: the node's saved budget, 0 when none) and whether auto-pause can work here. One line
 * per fact, aligned like the rest of the CLI's output.
 */
export function doctorLines(install: LlamaInstall, r: BackendResolution, probe: MachineProbe, autoPause: { available: boolean; why: string }, cpuBudgetMb = 0): string[] {
  // Without koffi no library could be tried: each is unknown, not missing.
  const yes = (b: boolean): string => (probe.ffi ? 'unknown' : b ? 'yes' : 'no');
  const lib = (name: string): string => `${name} ${yes(probe.libs[name] === true)}`;
  const driver = cudaDriverLibrary(probe.platform);
  const loader = vulkanLoader(probe.platform);
  const runtime = Object.keys(probe.libs).filter((l) => /cud|cublas/.test(l) && l !== driver);
  const out = [
    `llama-server     ${install.serverPath}${install.source === 'env' ? '  (RELAY_LLAMA_BIN_DIR)' : install.source === 'shipped' ? '  (shipped with relay: nothing is built here)' : ''}`,
    `ggml-rpc-server  ${install.rpcServerPath}`,
    `llama.cpp        ${install.tag === install.version ? install.version : `${install.tag} (${install.version})`}`,
  ];
  if (probe.ffi) out.push(`library probe    failed: ${probe.ffi}`);
  const smi = probe.nvidiaSmi ? 'yes' : 'no';
  out.push(`NVIDIA driver    ${probe.nvidiaSmi ? 'yes' : yes(probe.libs[driver] === true)} (${lib(driver)}, ${probe.platform === 'win32' ? 'nvidia-smi.exe' : 'nvidia-smi'} ${smi})`);
  if (runtime.length > 0) out.push(`CUDA runtime     ${runtime.map(lib).join(', ')}`);
  if (loader in probe.libs) {
    // Windows drivers register with the loader in the registry, not as manifest files: --list-devices below tells.
    const loads = yes(probe.libs[loader] === true);
    if (probe.platform === 'win32') out.push(`Vulkan           loader ${loads} (${loader}), drivers: registered in the Windows registry (the devices below tell)`);
    else out.push(`Vulkan           loader ${loads}, drivers: ${probe.vulkanIcds.map((f) => f.split('/').pop()).join(', ') || 'none'}`);
  }
  const built = Object.entries(probe.sourceModules).map(([b, p]) => `${b} (${p})`);
  if (built.length > 0) out.push(`built here       ${built.join(', ')}`);
  out.push(`backend          ${r.backend}: ${r.reason}`);
  if (r.module) out.push(`module           ${r.module}${r.from === 'shipped' ? '  (shipped with relay)' : ''}`);
  out.push('devices          (llama-server --list-devices)');
  if (r.devices.length === 0) out.push('  none: CPU only (the hub serves only with an opted-in --cpu-budget-mb)');
  for (const d of r.devices) out.push(`  ${d.name}: ${d.description} — ${d.totalMib} MiB total, ${d.freeMib} MiB free`);
  out.push(`as a node        lends ${lendsLine(r.devices, cpuBudgetMb).line}`);
  out.push(`auto-pause       ${autoPause.available ? 'available' : 'unavailable'}: ${autoPause.why}`);
  return out;
}
