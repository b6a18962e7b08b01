import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { matchReading, mergeDevices, normalizeBusId } from '../../src/main/core/gpu/inventory.js';
import { memoryBandwidthGBps, otherProcessesMb, type GpuReading } from '../../src/main/core/gpu/nvml.js';
import { parseNvidiaSmi } from '../../src/main/core/gpu/smi.js';
import { backendCandidates, describeCandidate, type MachineProbe } from '../../src/main/core/llama/backend-choice.js';
import { backendEnv, resolveBackend } from '../../src/main/core/llama/backends.js';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freeAfterReservations, type Reservation } from '../../src/main/core/scheduler/decide/plan.js';
import { machineProbe } from '../helpers/probe.js';

const linux = (over: Partial<MachineProbe> = {}): MachineProbe => machineProbe('linux', over);
const names = (p: MachineProbe, choice: Parameters<typeof backendCandidates>[1] = 'auto'): string[] => backendCandidates(p, choice).candidates.map(describeCandidate);

describe('backend candidates (pure): CUDA where its runtime loads, else Vulkan, else the CPU', () => {
  it('a gaming PC with the driver and the CUDA 13 runtime: CUDA 13 first, then Vulkan', () => {
    const p = linux({
      nvidiaSmi: true,
      vulkanIcds: ['/usr/share/vulkan/icd.d/nvidia_icd.json'],
      libs: { ...linux().libs, 'libcuda.so.1': true, 'libcudart.so.13': true, 'libcublas.so.13': true, 'libvulkan.so.1': true },
    });
    assert.deepEqual(names(p), ['cuda (@node-llama-cpp/linux-x64-cuda@3.21.1)', 'vulkan (@node-llama-cpp/linux-x64-vulkan@3.21.1)']);
  });

  it('the driver without a CUDA runtime (what households have): Vulkan, and the note says why', () => {
    const p = linux({ nvidiaSmi: true, vulkanIcds: ['/usr/share/vulkan/icd.d/nvidia_icd.json'], libs: { ...linux().libs, 'libcuda.so.1': true, 'libvulkan.so.1': true } });
    const c = backendCandidates(p, 'auto');
    assert.deepEqual(
      c.candidates.map((x) => x.backend),
      ['vulkan'],
    );
    assert.match(c.notes[0]!, /^NVIDIA driver found, CUDA runtime missing \(CUDA 13 runtime .* or CUDA 12 runtime/);
  });

  it('only the CUDA 12 runtime: the CUDA 12 module (sm_50–80), never both', () => {
    const p = linux({ libs: { ...linux().libs, 'libcuda.so.1': true, 'libcudart.so.12': true, 'libcublas.so.12': true } });
    assert.deepEqual(names(p), ['cuda (@node-llama-cpp/linux-x64-cuda-ext@3.21.1)']);
  });

  it('a module built here from source comes before the prebuilt one of its backend', () => {
    const p = linux({ nvidiaSmi: true, sourceModules: { cuda: '/c/backends/cuda/libggml-cuda.so' }, libs: { ...linux().libs, 'libcuda.so.1': true } });
    assert.deepEqual(names(p), ['cuda (built here from source)']);
  });

  it('no GPU stack: no candidate, and each absence is named', () => {
    const c = backendCandidates(linux(), 'auto');
    assert.deepEqual(c.candidates, []);
    assert.deepEqual(c.notes, ['no NVIDIA driver (libcuda.so.1, nvidia-smi)', 'no Vulkan loader (libvulkan.so.1)']);
    const loaderOnly = backendCandidates(linux({ libs: { ...linux().libs, 'libvulkan.so.1': true } }), 'auto');
    assert.deepEqual(loaderOnly.notes.at(-1), 'a Vulkan loader but no Vulkan driver (ICD)');
  });

  it('--backend narrows the list; cpu has none; metal needs Apple silicon', () => {
    const p = linux({ nvidiaSmi: true, vulkanIcds: ['x.json'], libs: { ...linux().libs, 'libcuda.so.1': true, 'libcudart.so.13': true, 'libcublas.so.13': true, 'libvulkan.so.1': true } });
    assert.deepEqual(
      backendCandidates(p, 'vulkan').candidates.map((c) => c.backend),
      ['vulkan'],
    );
    assert.deepEqual(backendCandidates(p, 'cpu').candidates, []);
    assert.deepEqual(backendCandidates(p, 'metal').notes, ['Metal needs macOS on Apple silicon']);
    const mac = { ...linux(), platform: 'darwin' as const, arch: 'arm64', sourceModules: { metal: '/m/libggml-metal.so' } };
    assert.deepEqual(names(mac), ['metal (built here from source)']);
  });

  it('children get the module by GGML_BACKEND_PATH, and CUDA numbers devices in PCI bus order', () => {
    assert.deepEqual(backendEnv(null, 'cpu'), {});
    assert.deepEqual(backendEnv('/m/libggml-vulkan.so', 'vulkan'), { GGML_BACKEND_PATH: '/m/libggml-vulkan.so' });
    assert.deepEqual(backendEnv('/m/libggml-cuda.so', 'cuda'), { GGML_BACKEND_PATH: '/m/libggml-cuda.so', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' });
  });
});

const reading = (index: number, busId: string, name = 'NVIDIA GeForce RTX 4070', uuid = `GPU-${index}aaa`): GpuReading => ({
  index,
  name,
  totalMb: 12282,
  freeMb: 11000 - index,
  utilizationPct: index,
  busId,
  uuid,
  source: 'nvml',
});

describe('a portable release downloads nothing', () => {
  it('a CUDA module it does not ship is left out with a note, not fetched from the registry', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'relay-offline-'));
    try {
      const probe = linux({
        nvidiaSmi: true,
        libs: { 'libcuda.so.1': true, 'libcudart.so.12': true, 'libcublas.so.12': true, 'libcudart.so.13': false, 'libcublas.so.13': false, 'libvulkan.so.1': false },
      });
      const r = await resolveBackend({ serverPath: join(cache, 'no-llama-server'), choice: 'auto', sourceModules: {}, shipped: {}, offline: true, probe, env: { RELAY_CACHE_DIR: cache } });
      assert.equal(r.backend, 'cpu');
      assert.ok(
        r.notes.some((n) => n.startsWith('cuda (@node-llama-cpp/linux-x64-cuda-ext@3.21.1) is not in this release (`npm run release -- --cuda 12` ships it')),
        r.notes.join('\n'),
      );
      assert.deepEqual(readdirSync(cache), [], 'nothing fetched into the cache');
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

describe('NVML ↔ llama.cpp device matching (pure): by PCI bus id or UUID, not by position', () => {
  // NVML's own index order need not be bus order; CUDA (with CUDA_DEVICE_ORDER=PCI_BUS_ID) is.
  const readings = [reading(0, '00000000:81:00.0'), reading(1, '00000000:01:00.0'), reading(2, '00000000:41:00.0')];
  const dev = (name: string, description = 'NVIDIA GeForce RTX 4070') => ({ name, description, totalMib: 12000, freeMib: 9000 });

  it('CUDA<i> is the i-th GPU in PCI bus order', () => {
    assert.deepEqual(
      ['CUDA0', 'CUDA1', 'CUDA2'].map((n) => matchReading(dev(n), readings)?.busId),
      ['00000000:01:00.0', '00000000:41:00.0', '00000000:81:00.0'],
    );
  });

  it('CUDA_VISIBLE_DEVICES by index (bus order) or by UUID prefix renumbers the visible ones', () => {
    assert.equal(matchReading(dev('CUDA0'), readings, '2')?.busId, '00000000:81:00.0');
    assert.equal(matchReading(dev('CUDA1'), readings, '2,0')?.busId, '00000000:01:00.0');
    assert.equal(matchReading(dev('CUDA0'), readings, 'GPU-1a')?.busId, '00000000:01:00.0');
    assert.equal(matchReading(dev('CUDA1'), readings, '0'), undefined);
  });

  it('a Vulkan device matches the one NVIDIA GPU of its name, none when the name is ambiguous', () => {
    const mixed = [reading(0, '0:01:00.0', 'NVIDIA GeForce GTX 1060 6GB'), reading(1, '0:02:00.0', 'NVIDIA GeForce RTX 4070')];
    assert.equal(matchReading(dev('Vulkan1', 'NVIDIA GeForce RTX 4070'), mixed)?.index, 1);
    assert.equal(matchReading(dev('Vulkan0', 'NVIDIA GeForce RTX 4070'), readings), undefined);
    assert.equal(matchReading(dev('Vulkan0', 'llvmpipe (LLVM 15.0.6, 256 bits)'), mixed), undefined);
  });

  it("merged devices carry the matched bus id and the driver's free memory; unmatched ones keep llama-server's", () => {
    // Each reading dated by when it was taken: the driver's (every second), llama-server's list (every few).
    const merged = mergeDevices([dev('CUDA0'), dev('Vulkan0', 'llvmpipe')], readings, 0, { readAt: 42, readingsAt: 77 });
    assert.deepEqual(
      merged.map((d) => [d.id, d.reportedFreeMb, d.source, d.busId, d.readAt]),
      [
        ['CUDA0', 10999, 'nvml', '00000000:01:00.0', 77],
        ['Vulkan0', 9000, 'llama-server', null, 42],
      ],
    );
  });

  it("a GPU's memory bandwidth: bus width × NVML's top memory clock × 2, carried onto its llama.cpp device", () => {
    // Published peaks: GTX 1060 6GB 192 GB/s, RTX 4070 SUPER 504, H100 SXM 3352.
    assert.equal(memoryBandwidthGBps(192, 4004), 192.192);
    assert.equal(memoryBandwidthGBps(192, 10501), 504.048);
    assert.equal(memoryBandwidthGBps(5120, 2619), 3352.32);
    assert.equal(memoryBandwidthGBps(0, 10501), undefined, 'a driver that does not tell');
    assert.equal(memoryBandwidthGBps(192, NaN), undefined);
    const withBw = [{ ...reading(0, '00000000:01:00.0'), memGBps: 504.048 }];
    const merged = mergeDevices([dev('CUDA0'), dev('Vulkan0', 'llvmpipe')], withBw, 512);
    assert.deepEqual(
      merged.map((d) => [d.id, d.memGBps]),
      [
        ['CUDA0', 504.048],
        ['Vulkan0', undefined],
        ['CPU', undefined],
      ],
    );
  });

  it("bus ids compare across NVML's and ggml's spellings", () => {
    assert.equal(normalizeBusId('00000000:19:00.0'), normalizeBusId('0000:19:00.0'));
    assert.notEqual(normalizeBusId('00000000:19:00.0'), normalizeBusId('00000000:1A:00.0'));
  });

  it('nvidia-smi readings carry the bus id and the UUID', () => {
    const r = parseNvidiaSmi('0, NVIDIA H200, 143771, 143252, 0, 00000000:19:00.0, GPU-5b6a6c1e-aaaa\n');
    assert.deepEqual(
      r.map((x) => [x.index, x.busId, x.uuid]),
      [[0, '00000000:19:00.0', 'GPU-5b6a6c1e-aaaa']],
    );
    assert.equal(parseNvidiaSmi('0, GTX, 6144, 6000, 3\n')[0]!.busId, null);
  });
});

describe("auto-pause input (pure): games are graphics processes; relay's children do not count", () => {
  it('sums other processes over compute and graphics lists, once per process and device', () => {
    const perDevice = [
      [
        { pid: 10, mb: 900 },
        { pid: 11, mb: 300 },
        /* graphics list: */ { pid: 11, mb: 300 },
        { pid: 12, mb: 2000 },
      ],
      [{ pid: 12, mb: 100 }],
    ];
    assert.equal(otherProcessesMb(perDevice, new Set([10])), 300 + 2000 + 100);
    assert.equal(otherProcessesMb(perDevice, new Set([10, 11, 12])), 0);
    // An unknown size (NVML's 2^64-1) still says a program holds the GPU.
    assert.equal(otherProcessesMb([[{ pid: 7, mb: 2 ** 64 / 2 ** 20 }]], new Set()), 1);
  });
});

describe('free memory from a refreshed device list', () => {
  const view = (over: Partial<Reservation>): Reservation => ({ id: 'r', model: 'm', device: 'Vulkan0', needMb: 1000, state: 'ready', inFlight: 0, lastUsedAt: 0, ...over });
  it('a replica that became ready after the reading still counts; one the reading saw does not count twice', () => {
    const dev = [{ id: 'Vulkan0', kind: 'gpu' as const, totalMb: 8000, reportedFreeMb: 5000, readAt: 100 }];
    assert.equal(freeAfterReservations(dev, [view({ readyAt: 150 })])[0]!.freeMb, 4000);
    assert.equal(freeAfterReservations(dev, [view({ readyAt: 50 })])[0]!.freeMb, 5000);
    assert.equal(freeAfterReservations(dev, [view({ state: 'starting', readyAt: 0 })])[0]!.freeMb, 4000);
  });
});
