import { cudaDriverLibrary } from '../gpu/names.js';

/**
 * Which GPU backend a machine can run, pure: a probe of the machine in, an ordered list of candidates and
 * the reasons for what was left out. No I/O; backends.ts probes, fetches and verifies.
 *
 * Order (the issue's, and what a household expects): CUDA where its runtime libraries load, else Vulkan,
 * else the CPU. A module built here from source with a local toolkit comes before the registry's prebuilt
 * one of the same backend (it was built for this GPU). `--backend` / RELAY_LLAMA_BACKEND narrows the list.
 */

export const GPU_BACKENDS = ['cuda', 'vulkan', 'metal'] as const;
export type GpuBackend = (typeof GPU_BACKENDS)[number];
export const BACKEND_CHOICES = ['auto', 'cpu', ...GPU_BACKENDS] as const;
export type BackendChoice = (typeof BACKEND_CHOICES)[number];

/**
 * A prebuilt backend module of the same llama.cpp release relay builds, published by node-llama-cpp as an npm
 * package (built with GGML_BACKEND_DL, so it loads into relay's own libggml-base). Pinned and integrity-checked
 * like the source tarball.
 */
export interface BackendPackage {
  /** Also the folder name under the cache's backends/ dir. */
  readonly id: string;
  readonly backend: GpuBackend;
  readonly platform: NodeJS.Platform;
  readonly arch: string;
  readonly package: string;
  readonly version: string;
  readonly integrity: string;
  /** The module's path inside the tarball (matched against `tar -t`). */
  readonly file: RegExp;
  /** Shared libraries the module needs at run time; each must load on this machine for it to be tried. */
  readonly needs: readonly string[];
  /** What a user reads when `needs` are missing. */
  readonly runtime: string;
}

const NLC = '3.21.1';
export const BACKEND_PACKAGES: readonly BackendPackage[] = [
  {
    id: 'cuda13',
    backend: 'cuda',
    platform: 'linux',
    arch: 'x64',
    package: '@node-llama-cpp/linux-x64-cuda',
    version: NLC,
    integrity: 'sha512-idsE55VoD/FbvLhnBC9krUJaUoC0XnebseAAnCpm/brKf61HEbu+idgbb5eN6mxkjLSrHtILprJ0nDcUJjVrFg==',
    file: /^package\/bins\/linux-x64-cuda\/libggml-cuda\.so$/,
    needs: ['libcuda.so.1', 'libcudart.so.13', 'libcublas.so.13'],
    runtime: 'CUDA 13 runtime (libcudart.so.13, libcublas.so.13)',
  },
  {
    id: 'cuda12',
    backend: 'cuda',
    platform: 'linux',
    arch: 'x64',
    package: '@node-llama-cpp/linux-x64-cuda-ext',
    version: NLC,
    integrity: 'sha512-1PuURowccBcks3CCoMe1mTHh5vD0V5bFHMUEgtbI/OSDjpP+Pdbn+lf42CGUrepTzR8kCH1HovQ7d8q6/vuIKA==',
    file: /^package\/bins\/linux-x64-cuda\/fallback\/libggml-cuda\.so$/,
    needs: ['libcuda.so.1', 'libcudart.so.12', 'libcublas.so.12'],
    runtime: 'CUDA 12 runtime (libcudart.so.12, libcublas.so.12)',
  },
  {
    id: 'vulkan',
    backend: 'vulkan',
    platform: 'linux',
    arch: 'x64',
    package: '@node-llama-cpp/linux-x64-vulkan',
    version: NLC,
    integrity: 'sha512-flEeSzONQ6OIm5bYKLQf4eEnBzcC5WugFbyPUwkCqyyOFZ8pH0H9ulQ7ZNDLSIczeKneMRJornlyY1Hq7d3GDA==',
    file: /^package\/bins\/linux-x64-vulkan\/libggml-vulkan\.so$/,
    needs: ['libvulkan.so.1'],
    runtime: 'a Vulkan loader (libvulkan.so.1)',
  },
  {
    // MSVC-built: its 33 ggml-base imports are all exported by relay's mingw ggml-base.dll (checked with objdump),
    // and under Wine it loads beside it and initialises (docs/how-it-works.md#windows). It brings no C runtime.
    id: 'win64-vulkan',
    backend: 'vulkan',
    platform: 'win32',
    arch: 'x64',
    package: '@node-llama-cpp/win-x64-vulkan',
    version: NLC,
    integrity: 'sha512-HJ237Azh5m4Sz+w3A1IU/fYLaSDOocskcfn2ILTgqTuuORCB86EMnu3Yt/XsNhRHTtEiwz1Q/E0mO4PLIbZLAA==',
    file: /^package\/bins\/win-x64-vulkan\/ggml-vulkan\.dll$/,
    needs: ['vulkan-1.dll', 'msvcp140.dll', 'vcruntime140.dll'],
    runtime: "a Vulkan loader (vulkan-1.dll, a GPU driver's) and the Visual C++ 2015-2022 runtime (msvcp140.dll, vcruntime140.dll)",
  },
];

/** The Vulkan loader a platform's modules link against. */
export function vulkanLoader(platform: NodeJS.Platform): string {
  return platform === 'win32' ? 'vulkan-1.dll' : 'libvulkan.so.1';
}

/** What backends.ts found on this machine. Only `libs` that were asked about are present. */
export interface MachineProbe {
  readonly platform: NodeJS.Platform;
  readonly arch: string;
  /** Shared library name → whether it loads here (dlopen). */
  readonly libs: Readonly<Record<string, boolean>>;
  /**
   * Why libraries could not be tried at all (koffi, relay's FFI, did not load: a release or app missing its
   * native module), or null when they were. With it set, every `libs` entry is unknown, not absent.
   */
  readonly ffi?: string | null;
  /** nvidia-smi answered (a driver is installed even when its CUDA library is not on the loader path). */
  readonly nvidiaSmi: boolean;
  /** Vulkan ICD manifests (installable client drivers); a loader without one lists no device. */
  readonly vulkanIcds: readonly string[];
  /** Modules built here from source (`relay llama build --backend …`), by backend. */
  readonly sourceModules: Readonly<Partial<Record<GpuBackend, string>>>;
}

export type Candidate = { readonly backend: GpuBackend; readonly from: 'source'; readonly module: string } | { readonly backend: GpuBackend; readonly from: 'package'; readonly pkg: BackendPackage };

export interface CandidateList {
  readonly candidates: readonly Candidate[];
  /** Why each backend that is not a candidate was left out, in the order tried. */
  readonly notes: readonly string[];
}

/** The libraries backends.ts should probe for this platform. */
export function librariesToProbe(platform: NodeJS.Platform, arch: string, packages: readonly BackendPackage[] = BACKEND_PACKAGES): string[] {
  return [...new Set(packages.filter((p) => p.platform === platform && p.arch === arch).flatMap((p) => p.needs))];
}

export function backendCandidates(probe: MachineProbe, choice: BackendChoice, packages: readonly BackendPackage[] = BACKEND_PACKAGES): CandidateList {
  const out: Candidate[] = [];
  const notes: string[] = [];
  if (choice === 'cpu') return { candidates: [], notes: ['the CPU was chosen (--backend cpu / RELAY_LLAMA_BACKEND=cpu)'] };
  if (probe.ffi) return { candidates: [], notes: [`${probe.ffi}, so this machine's GPU libraries could not be looked for (reinstall relay)`] };
  const loads = (lib: string): boolean => probe.libs[lib] === true;
  const mine = packages.filter((p) => p.platform === probe.platform && p.arch === probe.arch);
  const wanted = (b: GpuBackend): boolean => choice === 'auto' || choice === b;

  if (wanted('cuda')) {
    const driver = loads(cudaDriverLibrary(probe.platform)) || probe.nvidiaSmi;
    if (!driver && !probe.sourceModules.cuda) {
      notes.push(`no NVIDIA driver (${cudaDriverLibrary(probe.platform)}, nvidia-smi)`);
    } else {
      if (probe.sourceModules.cuda) out.push({ backend: 'cuda', from: 'source', module: probe.sourceModules.cuda });
      const cuda = mine.filter((p) => p.backend === 'cuda');
      for (const p of cuda) {
        const missing = p.needs.filter((l) => !loads(l));
        if (missing.length === 0) out.push({ backend: 'cuda', from: 'package', pkg: p });
      }
      if (!out.some((c) => c.backend === 'cuda')) {
        notes.push(
          cuda.length === 0
            ? `NVIDIA driver found, but no prebuilt CUDA module for ${probe.platform}-${probe.arch} (build one: relay llama build --backend cuda)`
            : `NVIDIA driver found, CUDA runtime missing (${cuda.map((p) => p.runtime).join(' or ')})`,
        );
      }
    }
  }

  if (wanted('vulkan')) {
    if (probe.sourceModules.vulkan) out.push({ backend: 'vulkan', from: 'source', module: probe.sourceModules.vulkan });
    const vk = mine.filter((p) => p.backend === 'vulkan');
    const loader = vulkanLoader(probe.platform);
    if (!loads(loader)) {
      if (!probe.sourceModules.vulkan) notes.push(`no Vulkan loader (${loader})`);
    } else if (probe.vulkanIcds.length === 0 && probe.platform !== 'win32') {
      // Windows drivers register in the registry, not as manifest files: there `--list-devices` decides.
      if (!probe.sourceModules.vulkan) notes.push('a Vulkan loader but no Vulkan driver (ICD)');
    } else {
      for (const p of vk) {
        const missing = p.needs.filter((l) => !loads(l));
        if (missing.length === 0) out.push({ backend: 'vulkan', from: 'package', pkg: p });
        else notes.push(`${p.package} needs ${p.runtime}: ${missing.join(', ')} missing`);
      }
      if (vk.length === 0 && !probe.sourceModules.vulkan) notes.push(`no prebuilt Vulkan module for ${probe.platform}-${probe.arch}`);
    }
  }

  if (wanted('metal')) {
    if (probe.platform === 'darwin' && probe.arch === 'arm64') {
      if (probe.sourceModules.metal) out.push({ backend: 'metal', from: 'source', module: probe.sourceModules.metal });
      else notes.push('Apple silicon: build the Metal module with `relay llama build --backend metal`');
    } else if (choice === 'metal') {
      notes.push('Metal needs macOS on Apple silicon');
    }
  }
  return { candidates: out, notes };
}

/** The llama.cpp device-name prefix a backend's devices carry (CUDA0, Vulkan0, MTL0). */
export function devicePrefix(b: GpuBackend): string {
  return b === 'cuda' ? 'CUDA' : b === 'vulkan' ? 'Vulkan' : 'MTL';
}

export function describeCandidate(c: Candidate): string {
  return c.from === 'source' ? `${c.backend} (built here from source)` : `${c.backend} (${c.pkg.package}@${c.pkg.version})`;
}
