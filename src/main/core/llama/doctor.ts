import { cudaDriverLibrary } from '../gpu/names.js';
import { vulkanLoader, type MachineProbe } from './backend-choice.js';
import type { BackendResolution } from './backends.js';
import type { LlamaInstall } from './install.js';

/**
 * `relay doctor`'s report, pure: what the machine has, the backend relay uses and why, the devices, and
 * whether auto-pause can work here. One line per fact, aligned like the rest of the CLI's output.
 */
export function doctorLines(install: LlamaInstall, r: BackendResolution, probe: MachineProbe, autoPause: { available: boolean; why: string }): string[] {
  const yes = (b: boolean): string => (b ? 'yes' : 'no');
  const lib = (name: string): string => `${name} ${yes(probe.libs[name] === true)}`;
  const driver = cudaDriverLibrary(probe.platform);
  const loader = vulkanLoader(probe.platform);
  const runtime = Object.keys(probe.libs).filter((l) => /cud|cublas/.test(l) && l !== driver);
  const out = [
    `llama-server     ${install.serverPath}${install.source === 'env' ? '  (RELAY_LLAMA_BIN_DIR)' : ''}`,
    `ggml-rpc-server  ${install.rpcServerPath}`,
    `llama.cpp        ${install.tag} (${install.version})`,
    `NVIDIA driver    ${yes(probe.libs[driver] === true || probe.nvidiaSmi)} (${lib(driver)}, ${probe.platform === 'win32' ? 'nvidia-smi.exe' : 'nvidia-smi'} ${yes(probe.nvidiaSmi)})`,
  ];
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
  if (r.module) out.push(`module           ${r.module}${r.from === 'shipped' ? '  (shipped with the app)' : ''}`);
  out.push('devices          (llama-server --list-devices)');
  if (r.devices.length === 0) out.push('  none: CPU only (the hub serves only with an opted-in --cpu-budget-mb)');
  for (const d of r.devices) out.push(`  ${d.name}: ${d.description} — ${d.totalMib} MiB total, ${d.freeMib} MiB free`);
  out.push(`auto-pause       ${autoPause.available ? 'available' : 'unavailable'}: ${autoPause.why}`);
  return out;
}
