import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, it } from 'node:test';
import { cudaDriverLibrary, firstPresent, nvidiaSmiCandidates, nvmlCandidates, nvmlName, systemLibraryPath } from '../../src/main/core/gpu/names.js';
import { autoPauseWhy, loadFirst, NVML_STRUCTS, nvmlStruct } from '../../src/main/core/gpu/nvml.js';
import { nvidiaSmiCommand } from '../../src/main/core/gpu/smi.js';
import { backendCandidates, type MachineProbe } from '../../src/main/core/llama/backend-choice.js';
import type { BackendResolution } from '../../src/main/core/llama/backends.js';
import { doctorLines } from '../../src/main/core/llama/doctor.js';
import type { LlamaInstall } from '../../src/main/core/llama/install.js';
import { machineProbe } from '../helpers/probe.js';

/**
 * The NVIDIA driver's files per platform (src/main/core/gpu/names.ts), with the platform as a parameter: what
 * NVML is loaded from, which nvidia-smi runs, what `relay doctor` names, and the NVML struct layouts koffi
 * reads, which must be the same on Windows (LLP64) as on Linux (LP64).
 */
const WIN_ENV = { SystemRoot: 'C:\\Windows', ProgramFiles: 'C:\\Program Files' };

describe('GPU readings on Windows: the names', () => {
  it('NVML: System32 first, then the older drivers’ NVSMI folder, full paths only; libnvidia-ml.so.1 on Linux; none on macOS', () => {
    assert.deepEqual(nvmlCandidates('win32', WIN_ENV), ['C:\\Windows\\System32\\nvml.dll', 'C:\\Program Files\\NVIDIA Corporation\\NVSMI\\nvml.dll']);
    assert.deepEqual(nvmlCandidates('win32', {}), nvmlCandidates('win32', WIN_ENV), 'the usual folders when the environment does not say');
    assert.deepEqual(nvmlCandidates('win32', { SystemRoot: 'D:\\Win', ProgramW6432: 'D:\\Programs', ProgramFiles: 'D:\\Programs (x86)' }), [
      'D:\\Win\\System32\\nvml.dll',
      'D:\\Programs\\NVIDIA Corporation\\NVSMI\\nvml.dll',
    ]);
    assert.deepEqual(nvmlCandidates('linux'), ['libnvidia-ml.so.1']);
    assert.deepEqual(nvmlCandidates('darwin'), []);
    assert.deepEqual([nvmlName('win32'), nvmlName('linux')], ['nvml.dll', 'libnvidia-ml.so.1']);
  });

  it('nvidia-smi: System32, then NVSMI, never a bare name on Windows; the first present is run', () => {
    const c = nvidiaSmiCandidates('win32', WIN_ENV);
    assert.deepEqual(c, ['C:\\Windows\\System32\\nvidia-smi.exe', 'C:\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe']);
    assert.deepEqual(nvidiaSmiCandidates('linux'), ['nvidia-smi']);
    assert.equal(
      nvidiaSmiCommand('win32', WIN_ENV, (p) => p === c[1]),
      c[1],
      'an old driver: the NVSMI folder',
    );
    assert.equal(
      nvidiaSmiCommand('win32', WIN_ENV, () => true),
      c[0],
    );
    assert.equal(
      nvidiaSmiCommand('win32', WIN_ENV, () => false),
      null,
      'neither folder: no NVIDIA driver (a nvidia-smi.exe in the current folder is never run)',
    );
    assert.deepEqual(
      ['vulkan-1.dll', 'msvcp140.dll'].map((n) => systemLibraryPath(n, 'win32', WIN_ENV)),
      ['C:\\Windows\\System32\\vulkan-1.dll', 'C:\\Windows\\System32\\msvcp140.dll'],
      'system libraries are probed by full path on Windows',
    );
    assert.equal(systemLibraryPath('libvulkan.so.1', 'linux'), 'libvulkan.so.1');
    assert.equal(
      nvidiaSmiCommand('linux', {}, () => false),
      'nvidia-smi',
    );
    assert.equal(
      firstPresent(['C:\\a\\x.dll', '/b/y.so'], () => false),
      null,
    );
  });

  it('the CUDA driver library is nvcuda.dll on Windows, and the backend notes name it', () => {
    assert.deepEqual([cudaDriverLibrary('win32'), cudaDriverLibrary('linux')], ['nvcuda.dll', 'libcuda.so.1']);
    const c = backendCandidates(win({ libs: { 'nvcuda.dll': false } }), 'auto');
    assert.equal(c.notes[0], 'no NVIDIA driver (nvcuda.dll, nvidia-smi)');
    const d = backendCandidates(win({ libs: { 'nvcuda.dll': true } }), 'cuda');
    assert.match(d.notes[0]!, /^NVIDIA driver found, but no prebuilt CUDA module for win32-x64/);
  });
});

describe('GPU readings on Windows: loading NVML', () => {
  it('tries each candidate in order and answers null, without throwing, when none loads', () => {
    const tried: string[] = [];
    const fake = (ok: string | null) => ({
      load(p: string) {
        tried.push(p);
        if (p !== ok) throw new Error(`Failed to load shared library: ${p}`);
        return { path: p } as never;
      },
    });
    const c = nvmlCandidates('win32', WIN_ENV);
    assert.equal(
      loadFirst(fake(null), c, () => true),
      null,
    );
    assert.deepEqual(tried, c, 'both tried');
    tried.length = 0;
    assert.deepEqual(
      loadFirst(fake(c[1]!), c, () => true),
      { path: c[1] },
    );
    tried.length = 0;
    assert.equal(
      loadFirst(fake(null), c, () => false),
      null,
    );
    assert.deepEqual(tried, [], 'a full path that is not there is never handed to the loader');
    assert.equal(loadFirst(fake('libnvidia-ml.so.1'), nvmlCandidates('linux'), () => false) !== null, true, 'a bare name goes to the loader');
  });

  it("auto-pause's unavailable line names the platform's NVML file", () => {
    assert.match(autoPauseWhy('absent', 'win32').why, /NVML \(nvml\.dll\) is not here/);
    assert.match(autoPauseWhy('absent', 'linux').why, /NVML \(libnvidia-ml\.so\.1\) is not here/);
    assert.equal(autoPauseWhy('ready', 'win32').available, true);
    assert.equal(autoPauseWhy('no-process-lists', 'win32').available, false);
  });

  it("the NVML structs have nvml.h's layout with fixed-width fields only (no C long, 32-bit on Windows)", () => {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    for (const [name, fields] of Object.entries(NVML_STRUCTS)) {
      for (const [field, t] of Object.entries(fields)) {
        const type = typeof t === 'string' ? t : t[0];
        assert.match(type, /^(u?int(8|16|32|64)|char)$/, `${name}.${field}: ${type}`);
      }
    }
    // Offsets and sizes as a C compiler lays out nvml.h's structs on x64, Linux or Windows alike.
    const layout = (which: keyof typeof NVML_STRUCTS) => {
      const s = nvmlStruct(koffi, which) as import('koffi').TypeObject;
      return [koffi.sizeof(s), ...Object.keys(NVML_STRUCTS[which]).map((f) => koffi.offsetof(s, f))];
    };
    assert.deepEqual(layout('nvmlMemory_t'), [24, 0, 8, 16]);
    assert.deepEqual(layout('nvmlUtilization_t'), [8, 0, 4]);
    assert.deepEqual(layout('nvmlPciInfo_t'), [68, 0, 16, 20, 24, 28, 32, 36]);
    assert.deepEqual(layout('nvmlProcessInfo_t'), [24, 0, 8, 16, 20]);
  });
});

const win = (over: Partial<MachineProbe> = {}): MachineProbe => machineProbe('win32', over);

describe("GPU readings on Windows: relay doctor's wording", () => {
  const install = { serverPath: 'C:\\relay\\llama-server.exe', rpcServerPath: 'C:\\relay\\ggml-rpc-server.exe', tag: 'b1', version: '1 (abc)', source: 'cache' } as LlamaInstall;
  const r: BackendResolution = { backend: 'vulkan', module: 'C:\\relay\\ggml-vulkan.dll', from: 'shipped', devices: [], reason: 'x', notes: [] };

  it('names nvcuda.dll, nvidia-smi.exe, vulkan-1.dll and nvml.dll on Windows, and no Linux library', () => {
    const lines = doctorLines(install, r, win({ nvidiaSmi: true }), autoPauseWhy('absent', 'win32'));
    const text = lines.join('\n');
    assert.ok(lines.includes('NVIDIA driver    yes (nvcuda.dll yes, nvidia-smi.exe yes)'), text);
    assert.ok(lines.includes('Vulkan           loader yes (vulkan-1.dll), drivers: registered in the Windows registry (the devices below tell)'), text);
    assert.match(text, /nvml\.dll/);
    assert.doesNotMatch(text, /\.so\b|libcuda|libvulkan|libnvidia|CUDA runtime/);
  });

  it('a release whose koffi module is missing says so, and calls each library unknown, not missing (nor the Vulkan loader absent)', () => {
    const ffi = "koffi's native module for win32-x64 did not load (Cannot find the native Koffi module; did you bundle it correctly?)";
    const probe = win({ ffi, libs: { 'nvcuda.dll': false, 'vulkan-1.dll': false, 'msvcp140.dll': false, 'vcruntime140.dll': false } });
    const cpu: BackendResolution = { backend: 'cpu', module: null, from: null, devices: [], reason: 'x', notes: [] };
    const lines = doctorLines(install, cpu, probe, autoPauseWhy('absent', 'win32'));
    const text = lines.join('\n');
    assert.ok(lines.includes(`library probe    failed: ${ffi}`), text);
    assert.ok(lines.includes('NVIDIA driver    unknown (nvcuda.dll unknown, nvidia-smi.exe no)'), text);
    assert.ok(lines.includes('Vulkan           loader unknown (vulkan-1.dll), drivers: registered in the Windows registry (the devices below tell)'), text);
    assert.doesNotMatch(text, /loader no/);
    // The backend rules give the same reason instead of "no Vulkan loader".
    assert.deepEqual(backendCandidates(probe, 'auto'), { candidates: [], notes: [`${ffi}, so this machine's GPU libraries could not be looked for (reinstall relay)`] });
  });

  it('says what a node here lends, and the flag when that is nothing', () => {
    const cpu: BackendResolution = { backend: 'cpu', module: null, from: null, devices: [], reason: 'x', notes: [] };
    const gpu: BackendResolution = { ...r, devices: [{ name: 'Vulkan0', description: 'NVIDIA GeForce RTX 3060', totalMib: 12288, freeMib: 11000 }] };
    const lends = (res: BackendResolution, mb: number): string => doctorLines(install, res, win(), autoPauseWhy('absent', 'win32'), mb).find((l) => l.startsWith('as a node'))!;
    assert.equal(
      lends(cpu, 0),
      'as a node        lends nothing: no GPU relay can use and no CPU budget. To serve from this CPU, start the node with --cpu-budget-mb N (MB of RAM models may use), e.g. `relay up --cpu-budget-mb 4096`',
    );
    assert.equal(lends(cpu, 2048), 'as a node        lends 2048 MB of RAM on its CPU (--cpu-budget-mb); no GPU relay can use');
    assert.equal(lends(gpu, 0), 'as a node        lends Vulkan0');
    assert.equal(lends(gpu, 1024), 'as a node        lends Vulkan0 and 1024 MB of RAM on its CPU (--cpu-budget-mb)');
  });

  it('on Linux it still names libcuda.so.1, the CUDA runtime libraries and the ICD files', () => {
    const probe: MachineProbe = {
      ...win(),
      platform: 'linux',
      vulkanIcds: ['/usr/share/vulkan/icd.d/nvidia_icd.json'],
      libs: { 'libcuda.so.1': true, 'libcudart.so.13': false, 'libcublas.so.13': false, 'libvulkan.so.1': true },
    };
    const lines = doctorLines(install, r, probe, autoPauseWhy('ready', 'linux'));
    assert.ok(lines.includes('NVIDIA driver    yes (libcuda.so.1 yes, nvidia-smi no)'), lines.join('\n'));
    assert.ok(lines.includes('CUDA runtime     libcudart.so.13 no, libcublas.so.13 no'), lines.join('\n'));
    assert.ok(lines.includes('Vulkan           loader yes, drivers: nvidia_icd.json'), lines.join('\n'));
  });
});
