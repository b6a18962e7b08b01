import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { BACKEND_PACKAGES, backendCandidates, describeCandidate, vulkanLoader, type MachineProbe } from '../../src/main/core/llama/backend-choice.js';
import { moduleFileName, shippedModulesIn } from '../../src/main/core/llama/backends.js';
import { binariesIn, binaryNames, shippedFileRule } from '../../src/main/core/llama/install.js';
import { machineProbe } from '../helpers/probe.js';

/**
 * The rules a packaged Windows app finds its llama.cpp files by (resources/llama, which the app hands to
 * findLlama as RELAY_LLAMA_BIN_DIR), tested here on Linux with the platform as a parameter;
 * test/windows/packaging-win.test.ts applies them to a real Windows layout.
 */
const win = (over: Partial<MachineProbe> = {}): MachineProbe => machineProbe('win32', over);

describe('the Windows layout rules', () => {
  it('names the programs with .exe on Windows only', () => {
    assert.deepEqual(binaryNames('win32'), { server: 'llama-server.exe', rpc: 'ggml-rpc-server.exe' });
    assert.deepEqual(binaryNames('linux'), { server: 'llama-server', rpc: 'ggml-rpc-server' });
    assert.equal(moduleFileName('vulkan', 'win32'), 'ggml-vulkan.dll');
    assert.equal(moduleFileName('vulkan', 'linux'), 'libggml-vulkan.so');
  });

  it("ships a platform's own files: the two programs and its shared libraries, nothing of another platform", () => {
    const w = shippedFileRule('win32');
    for (const f of ['llama-server.exe', 'ggml-rpc-server.exe', 'ggml-base.dll', 'libstdc++-6.dll', 'GGML-CPU.DLL']) assert.ok(w(f), f);
    for (const f of ['llama-server', 'libggml-base.so', 'llama-cli.exe', 'install.json', 'ggml.lib']) assert.ok(!w(f), f);
    const l = shippedFileRule('linux');
    for (const f of ['llama-server', 'ggml-rpc-server', 'libggml-base.so', 'libllama.so.0']) assert.ok(l(f), f);
    for (const f of ['llama-server.exe', 'ggml-base.dll']) assert.ok(!l(f), f);
  });

  it('finds the programs and the shipped Vulkan module in a resources/llama laid out for Windows', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-winlayout-'));
    try {
      for (const f of ['llama-server.exe', 'ggml-rpc-server.exe']) writeFileSync(join(dir, f), 'MZ');
      assert.deepEqual(binariesIn(dir, 'win32'), { serverPath: join(dir, 'llama-server.exe'), rpcServerPath: join(dir, 'ggml-rpc-server.exe') });
      assert.throws(() => binariesIn(dir, 'linux'), /the llama.cpp folder .* has no .*llama-server$/);
      const pkg = BACKEND_PACKAGES.find((p) => p.platform === 'win32' && p.backend === 'vulkan')!;
      mkdirSync(join(dir, 'backends', pkg.id), { recursive: true });
      writeFileSync(join(dir, 'backends', pkg.id, 'ggml-vulkan.dll'), 'MZ');
      assert.deepEqual(shippedModulesIn(join(dir, 'backends'), BACKEND_PACKAGES, 'win32'), { [pkg.id]: join(dir, 'backends', pkg.id, 'ggml-vulkan.dll') });
      assert.deepEqual(shippedModulesIn(join(dir, 'backends'), BACKEND_PACKAGES, 'linux'), {});
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a Windows PC with Vulkan tries the prebuilt Windows module (its drivers register in the registry, not as manifests)', () => {
    assert.equal(vulkanLoader('win32'), 'vulkan-1.dll');
    assert.deepEqual(backendCandidates(win(), 'auto').candidates.map(describeCandidate), ['vulkan (@node-llama-cpp/win-x64-vulkan@3.21.1)']);
    // The package's ids are cache folders too: a Windows module never lands in the Linux one's.
    assert.equal(new Set(BACKEND_PACKAGES.map((p) => p.id)).size, BACKEND_PACKAGES.length);
  });

  it('says what is missing: no Vulkan loader, or no Visual C++ runtime for the MSVC-built module', () => {
    const none = backendCandidates(win({ libs: { 'vulkan-1.dll': false } }), 'auto');
    assert.deepEqual(none.candidates, []);
    assert.ok(none.notes.includes('no Vulkan loader (vulkan-1.dll)'), none.notes.join('; '));
    const c = backendCandidates(win({ libs: { 'vulkan-1.dll': true, 'msvcp140.dll': false, 'vcruntime140.dll': true } }), 'auto');
    assert.deepEqual(c.candidates, []);
    assert.match(c.notes.join('; '), /win-x64-vulkan needs .*Visual C\+\+ .*: msvcp140\.dll missing/);
  });
});
