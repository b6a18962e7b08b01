import type { MachineProbe } from '../../src/main/core/llama/backend-choice.js';

/** The libraries each platform's probe reports by default: Linux has none of them, Windows all (a gaming PC). */
const LIBS: Record<'linux' | 'win32', Record<string, boolean>> = {
  linux: { 'libcuda.so.1': false, 'libcudart.so.13': false, 'libcublas.so.13': false, 'libcudart.so.12': false, 'libcublas.so.12': false, 'libvulkan.so.1': false },
  win32: { 'nvcuda.dll': true, 'vulkan-1.dll': true, 'msvcp140.dll': true, 'vcruntime140.dll': true },
};

/** A machine probe for the backend rules' unit tests; `over.libs` replaces the default libraries whole. */
export function machineProbe(platform: 'linux' | 'win32', over: Partial<MachineProbe> = {}): MachineProbe {
  return { platform, arch: 'x64', nvidiaSmi: false, vulkanIcds: [], sourceModules: {}, libs: LIBS[platform], ...over };
}
