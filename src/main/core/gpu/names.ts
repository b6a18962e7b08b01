import { win32 } from 'node:path';

/**
 * The NVIDIA driver's files by platform, pure: what nvml.ts loads, what smi.ts and backends.ts run, what
 * `relay doctor` names. On Linux the dynamic loader finds the libraries by name. On Windows the driver puts
 * nvml.dll and nvidia-smi.exe in System32 (older, pre-DCH drivers kept them in
 * `C:\Program Files\NVIDIA Corporation\NVSMI`, which is not on the loader's path), so relay tries full paths,
 * in order: a bare DLL name would also search the current folder, which any download can write to.
 */

type Env = Readonly<Record<string, string | undefined>>;

function windowsDirs(env: Env): { system32: string; nvsmi: string } {
  const root = env.SystemRoot ?? env.SYSTEMROOT ?? env.windir ?? 'C:\\Windows';
  const programFiles = env.ProgramW6432 ?? env.ProgramFiles ?? env.PROGRAMFILES ?? 'C:\\Program Files';
  return { system32: win32.join(root, 'System32'), nvsmi: win32.join(programFiles, 'NVIDIA Corporation', 'NVSMI') };
}

/** NVML (the NVIDIA Management Library) candidates, tried in order; none where NVIDIA ships no NVML (macOS). */
export function nvmlCandidates(platform: NodeJS.Platform, env: Env = {}): string[] {
  if (platform === 'win32') {
    const d = windowsDirs(env);
    return [win32.join(d.system32, 'nvml.dll'), win32.join(d.nvsmi, 'nvml.dll')];
  }
  return platform === 'darwin' ? [] : ['libnvidia-ml.so.1'];
}

/**
 * nvidia-smi candidates, tried in order: on Windows only the two folders above (every NVIDIA driver puts it in
 * one); never a bare `nvidia-smi.exe`, which libuv would look for in the current folder first.
 */
export function nvidiaSmiCandidates(platform: NodeJS.Platform, env: Env = {}): string[] {
  if (platform === 'win32') {
    const d = windowsDirs(env);
    return [win32.join(d.system32, 'nvidia-smi.exe'), win32.join(d.nvsmi, 'nvidia-smi.exe')];
  }
  return ['nvidia-smi'];
}

/** Whether a candidate names a file by its path (checked for), not a bare name (for the loader or PATH to find). */
export const isFullPath = (c: string): boolean => /[\\/]/.test(c);

/** The first candidate that exists; a bare name is taken as it is, for PATH to decide. Null when none. */
export function firstPresent(candidates: readonly string[], exists: (path: string) => boolean): string | null {
  for (const c of candidates) if (!isFullPath(c) || exists(c)) return c;
  return null;
}

/**
 * Where a probe loads a system library from: on Windows the full path in System32 (the Vulkan loader, the CUDA
 * driver and the Visual C++ runtime live there; a bare name would also search the current folder and PATH,
 * and Electron's own folder ships a vulkan-1.dll that llama-server.exe would not find); elsewhere the name.
 */
export function systemLibraryPath(name: string, platform: NodeJS.Platform, env: Env = {}): string {
  return platform === 'win32' ? win32.join(windowsDirs(env).system32, name) : name;
}

/** The CUDA driver library (the driver's, not the toolkit's): whether an NVIDIA driver is installed. */
export function cudaDriverLibrary(platform: NodeJS.Platform): string {
  return platform === 'win32' ? 'nvcuda.dll' : 'libcuda.so.1';
}

/** The NVML file a user is told about (the first candidate's file name), e.g. in auto-pause's "unavailable". */
export function nvmlName(platform: NodeJS.Platform): string {
  return platform === 'win32' ? 'nvml.dll' : platform === 'darwin' ? 'NVML' : 'libnvidia-ml.so.1';
}
