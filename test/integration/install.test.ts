import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import {
  BACKEND_PACKAGES,
  chooseBackend,
  ensureLlama,
  ensurePackageModule,
  findLlama,
  installDir,
  listDevicesWith,
  LLAMA_SOURCE,
  probeMachine,
  readVersion,
  resolveBackend,
} from '../../src/main/core/llama/index.js';
import { HostInventory } from '../../src/main/core/gpu/inventory.js';
import { lavapipeEnv, llama, vulkanLlama, vulkanModule } from '../helpers/llama.js';

const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;

describe('llama.cpp install: one shared, relocatable build', () => {
  it('the cached build is where the docs say, keyed by tag and layout, and runs the CPU until a backend is chosen', () => {
    const i = llama();
    assert.equal(i.source, 'cache');
    assert.equal(i.tag, LLAMA_SOURCE.tag);
    assert.equal(i.binDir, join(installDir(), 'bin'));
    assert.match(i.binDir, /v0\.4\.0-shared\/bin$/);
    assert.match(i.version, /commit [0-9a-f]+/);
    assert.equal(i.backend, 'cpu');
    assert.deepEqual(i.env, {});
  });

  it('shared libraries with loadable backends: an unversioned libggml-base.so and an $ORIGIN rpath', () => {
    const files = readdirSync(llama().binDir);
    for (const f of ['libggml-base.so', 'libggml.so', 'libllama.so', 'libggml-cpu.so', 'libggml-rpc.so']) assert.ok(files.includes(f), `${f} in ${files.join(' ')}`);
    assert.equal(
      files.some((f) => /\.so\.\d/.test(f)),
      false,
      'no versioned sonames',
    );
    for (const bin of [llama().serverPath, llama().rpcServerPath]) {
      const dyn = execFileSync('readelf', ['-d', bin], { encoding: 'utf8' });
      assert.match(dyn, /R(UN)?PATH.*\[\$ORIGIN\]/, `${bin}: ${dyn}`);
    }
    const base = execFileSync('readelf', ['-d', join(llama().binDir, 'libggml-base.so')], { encoding: 'utf8' });
    assert.match(base, /SONAME.*\[libggml-base\.so\]/);
  });

  it('the folder works wherever it is copied (cache → packaged app): libraries resolve beside the binary', () => {
    const copy = mkdtempSync(join(tmpdir(), 'relay-reloc-'));
    cpSync(llama().binDir, copy, { recursive: true });
    const ldd = execFileSync('ldd', [join(copy, 'llama-server')], { encoding: 'utf8' });
    assert.match(ldd, new RegExp(`libllama\\.so => ${copy.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/libllama\\.so`));
    assert.equal(/not found/.test(ldd), false, ldd);
    assert.equal(readVersion(join(copy, 'llama-server')), llama().version);
    // The Vulkan module loads into the copy's own libggml-base (lavapipe stands in for a GPU).
    const { devices } = listDevicesWith(join(copy, 'llama-server'), vulkanModule(), { ...process.env, ...lavapipeEnv() });
    assert.deepEqual(
      devices.map((d) => d.name),
      ['Vulkan0'],
    );
  });

  it('a second ensureLlama returns the cached build without building anything', async () => {
    const lines: string[] = [];
    const i = await ensureLlama({ backend: 'cpu', progress: (l) => lines.push(l) });
    assert.equal(i.binDir, llama().binDir);
    assert.deepEqual(lines, []);
  });

  it("honours RELAY_LLAMA_BIN_DIR (a user's own build) and refuses one without the binaries", () => {
    const own = findLlama({ env: { ...process.env, RELAY_LLAMA_BIN_DIR: llama().binDir } });
    assert.equal(own?.source, 'env');
    assert.equal(own?.version, llama().version);
    const empty = mkdtempSync(join(tmpdir(), 'relay-bin-'));
    assert.throws(
      () => findLlama({ env: { ...process.env, RELAY_LLAMA_BIN_DIR: empty } }),
      (e: unknown) => isRelayError(e, 'LLAMA_NOT_FOUND'),
    );
  });

  it("a user's own build with its GPU module beside the binaries is used as it is (no second module)", async () => {
    const own = mkdtempSync(join(tmpdir(), 'relay-own-'));
    cpSync(llama().binDir, own, { recursive: true });
    cpSync(vulkanModule(), join(own, 'libggml-vulkan.so'));
    const env = { ...process.env, ...lavapipeEnv(), RELAY_LLAMA_BIN_DIR: own };
    const { install } = await chooseBackend(findLlama({ env })!, { choice: 'auto', env });
    assert.deepEqual([install.backend, install.backendModule], ['vulkan', null]);
    assert.match(install.backendReason, /RELAY_LLAMA_BIN_DIR's own build lists Vulkan0 llvmpipe/);
  });

  it('finds nothing in an empty cache (then `relay llama build` or the hub builds it)', () => {
    assert.equal(findLlama({ env: { ...process.env, RELAY_CACHE_DIR: mkdtempSync(join(tmpdir(), 'relay-cache-')) } }), null);
  });
});

describe("backend detection with this machine's real loaders (Vulkan loader + lavapipe, no NVIDIA driver)", () => {
  const noLavapipe: NodeJS.ProcessEnv = { ...process.env };
  delete noLavapipe.GGML_VK_VISIBLE_DEVICES;

  it('the probe sees the Vulkan loader and its driver, and no NVIDIA driver', () => {
    const p = probeMachine({});
    assert.equal(p.libs['libvulkan.so.1'], true);
    assert.ok(
      p.vulkanIcds.some((f) => /lvp_icd/.test(f)),
      p.vulkanIcds.join(','),
    );
    assert.equal(p.libs['libcuda.so.1'], false);
    assert.equal(p.nvidiaSmi, false);
  });

  it('auto: the Vulkan module lists no device (lavapipe is a CPU), so the CPU, and the reason says so', async () => {
    const { install, resolution } = await chooseBackend(llama(), { choice: 'auto', env: noLavapipe });
    assert.equal(install.backend, 'cpu');
    assert.equal(install.backendModule, null);
    assert.deepEqual(resolution.devices, []);
    assert.match(install.backendReason, /^no NVIDIA driver \(libcuda\.so\.1, nvidia-smi\); vulkan \(@node-llama-cpp\/linux-x64-vulkan@3\.21\.1\) lists no Vulkan device.*: using the CPU$/);
  });

  it('auto with lavapipe listed: Vulkan, with the module every child loads', async () => {
    const { install, resolution } = await chooseBackend(llama(), { choice: 'auto', env: { ...process.env, ...lavapipeEnv() } });
    assert.equal(install.backend, 'vulkan');
    assert.equal(install.backendModule, vulkanModule());
    assert.deepEqual(install.env, { GGML_BACKEND_PATH: vulkanModule() });
    assert.match(resolution.devices[0]!.description, /llvmpipe/);
    assert.match(install.backendReason, /using vulkan \(@node-llama-cpp\/linux-x64-vulkan@3\.21\.1\): Vulkan0 llvmpipe/);
  });

  it('an NVIDIA driver without the CUDA runtime (probe) falls to Vulkan and says why', async () => {
    const real = probeMachine({});
    const probe = { ...real, nvidiaSmi: true, libs: { ...real.libs, 'libcuda.so.1': true } };
    const r = await resolveBackend({ serverPath: llama().serverPath, choice: 'auto', sourceModules: {}, probe, env: { ...process.env, ...lavapipeEnv() } });
    assert.equal(r.backend, 'vulkan');
    assert.match(r.reason, /^NVIDIA driver found, CUDA runtime missing \(CUDA 13 runtime .*\): using vulkan/);
  });

  it('--backend cuda without a driver is a clear error; --backend cpu is the CPU', async () => {
    await assert.rejects(chooseBackend(llama(), { choice: 'cuda' }), (e: unknown) => isRelayError(e, 'BACKEND_UNAVAILABLE') && /no NVIDIA driver/.test(e.message));
    const { install } = await chooseBackend(llama(), { choice: 'cpu', env: { ...process.env, ...lavapipeEnv() } });
    assert.equal(install.backend, 'cpu');
  });

  it("the host inventory lists the backend's devices and re-reads them (free memory is not read once)", async () => {
    let t = 1000;
    const inv = new HostInventory(vulkanLlama(), 0, { read: () => Promise.resolve(null), listMs: 0, now: () => t });
    assert.deepEqual(inv.devices(), [], "nothing is read on the caller's path: no device before start()");
    await inv.start();
    const first = inv.devices();
    assert.deepEqual(
      first.map((d) => [d.id, d.kind, d.source, d.readAt]),
      [['Vulkan0', 'gpu', 'llama-server', 1000]],
    );
    t = 2000;
    await inv.refresh();
    assert.deepEqual(
      inv.devices().map((d) => [d.id, d.readAt]),
      [['Vulkan0', 2000]],
    );
    inv.close();
    const cpu = new HostInventory(llama(), 512, { read: () => Promise.resolve(null), listMs: 0 });
    await cpu.start();
    assert.deepEqual(
      cpu.devices().map((d) => [d.id, d.kind, d.totalMb]),
      [['CPU', 'cpu', 512]],
    );
  });

  it('a backend package that does not hash to its pinned integrity is refused and leaves nothing behind', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'relay-cache-'));
    const pkg = { ...BACKEND_PACKAGES.find((p) => p.id === 'vulkan')!, id: 'tampered', integrity: 'sha512-AAAA' };
    await assert.rejects(
      ensurePackageModule(pkg, { ...process.env, RELAY_CACHE_DIR: cache }, () => undefined),
      (e: unknown) => isRelayError(e, 'BACKEND_INTEGRITY'),
    );
    assert.deepEqual(readdirSync(join(cache, 'llama.cpp', 'modules')), []);
  });
});

describe('relay CLI', () => {
  it('`relay doctor` prints the binaries, what the machine has, the backend and why, the devices, auto-pause', async () => {
    const env = { ...process.env };
    delete env.GGML_VK_VISIBLE_DEVICES;
    delete env.RELAY_LLAMA_BACKEND;
    const { stdout } = await run(process.execPath, [relay, 'doctor'], { env });
    assert.match(stdout, new RegExp(`llama-server\\s+${llama().serverPath}`));
    assert.match(stdout, new RegExp(`ggml-rpc-server\\s+${llama().rpcServerPath}`));
    assert.match(stdout, new RegExp(`llama.cpp\\s+${LLAMA_SOURCE.tag.replace(/\./g, '\\.')}`));
    assert.match(stdout, /NVIDIA driver\s+no \(libcuda\.so\.1 no, nvidia-smi no\)/);
    assert.match(stdout, /Vulkan\s+loader yes, drivers: .*lvp_icd/);
    assert.match(stdout, /backend\s+cpu: no NVIDIA driver .*lists no Vulkan device.*: using the CPU/);
    assert.match(stdout, /devices\s+\(llama-server --list-devices\)\n\s+none: CPU only/);
    assert.match(stdout, /auto-pause\s+unavailable: NVIDIA's NVML \(libnvidia-ml\.so\.1\) is not here/);
    const gpu = await run(process.execPath, [relay, 'doctor', '--backend', 'vulkan'], { env: { ...env, ...lavapipeEnv() } });
    assert.match(gpu.stdout, /backend\s+vulkan: .*using vulkan .*Vulkan0 llvmpipe/);
    assert.match(gpu.stdout, /module\s+.*libggml-vulkan\.so/);
    assert.match(gpu.stdout, /\n\s+Vulkan0: llvmpipe .* MiB total/);
  });

  it('`relay llama build` returns the cached build at once', async () => {
    const { stdout } = await run(process.execPath, [relay, 'llama', 'build']);
    assert.match(stdout, new RegExp(`llama-server\\s+${llama().serverPath}`));
  });

  it('`relay doctor` with no build says how to get one and exits 1', async () => {
    const env = { ...process.env, RELAY_CACHE_DIR: mkdtempSync(join(tmpdir(), 'relay-cache-')) };
    await assert.rejects(run(process.execPath, [relay, 'doctor'], { env }), (e: { code: number; stdout: string }) => e.code === 1 && /relay llama build/.test(e.stdout));
  });

  it('an unknown command or backend is a clear error, not a stack trace', async () => {
    await assert.rejects(run(process.execPath, [relay, 'frobnicate']), (e: { code: number; stderr: string }) => e.code === 2 && /unknown command/.test(e.stderr));
    await assert.rejects(run(process.execPath, [relay, 'llama', 'build', '--backend', 'tpu']), (e: { code: number; stderr: string }) => e.code === 2 && /unknown backend "tpu"/.test(e.stderr));
    await assert.rejects(run(process.execPath, [relay, 'doctor', '--backend', 'tpu']), (e: { code: number; stderr: string }) => e.code === 2 && /unknown backend "tpu"/.test(e.stderr));
  });
});

describe('npm start', () => {
  it("without Electron's binary says so and starts the headless hub", async () => {
    const { spawn } = await import('node:child_process');
    const { createInterface } = await import('node:readline');
    const start = new URL('../../../scripts/start.js', import.meta.url).pathname;
    const home = mkdtempSync(join(tmpdir(), 'relay-start-'));
    const p = spawn(process.execPath, [start, '--port', '0', '--home', home], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const served = await new Promise<string>((resolve, reject) => {
      createInterface({ input: p.stdout }).on('line', (l) => {
        if (/\/v1\s+http/.test(l)) resolve(l);
      });
      p.once('exit', (code) => reject(new Error(`start exited ${code}: ${err}`)));
    });
    assert.match(served, /http:\/\/127\.0\.0\.1:\d+\/v1/);
    assert.match(err, /Electron's binary is not installed here/);
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  });
});
