import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { windowsNodeJson, winPath, winePrefix, type WinePrefix } from '../helpers/wine.js';

/**
 * relay's NVML loader (src/main/core/gpu/nvml.ts) run by Node.js for Windows under Wine, which has no nvml.dll:
 * koffi's Windows module loads and calls into kernel32, and NVML is reported absent, naming nvml.dll, with no
 * crash; readings and the auto-pause input are null (callers fall back to nvidia-smi, then --list-devices).
 * A few seconds: no llama.cpp build is needed.
 */
const repo = new URL('../../../', import.meta.url).pathname;

/** koffi's win32-x64 native module, the version package-lock.json pins (fetched as `npm run dist -- --win` does). */
async function koffiWindowsModule(): Promise<string> {
  const { koffiModule } = (await import(new URL('../../../scripts/stage-llama.mjs', import.meta.url).href)) as { koffiModule: (platform: string, arch: string) => Promise<string> };
  return koffiModule('win32', 'x64');
}

let wine: WinePrefix | undefined;
after(async () => {
  await wine?.close();
});

describe('GPU readings under Wine (Node.js for Windows, no NVIDIA driver)', { timeout: 300_000 }, () => {
  it('the NVML loader finds no nvml.dll and says so, without a crash', async () => {
    const koffiNode = await koffiWindowsModule();
    const work = mkdtempSync(join(tmpdir(), 'relay-wine-gpu-'));
    // koffi looks for <resourcesPath>/koffi/<triplet>/koffi.node, as in the packaged app.
    mkdirSync(join(work, 'koffi', 'win32_x64'), { recursive: true });
    writeFileSync(join(work, 'koffi', 'win32_x64', 'koffi.node'), readFileSync(koffiNode));
    const script = join(work, 'nvml-check.mjs');
    writeFileSync(
      script,
      [
        "import { createRequire } from 'node:module';",
        'process.resourcesPath = process.argv[2];',
        'const m = await import(process.argv[3]);',
        "const koffi = createRequire(process.argv[3])('koffi');",
        "const pid = koffi.load('kernel32.dll').func('uint32_t __stdcall GetCurrentProcessId(void)')();",
        'console.log(JSON.stringify({ koffi: pid === process.pid, support: m.autoPauseSupport(), readings: m.readNvml(), procs: m.otherProcessesGpuMb(new Set()) }));',
      ].join('\n'),
    );
    const nvml = `file:///${winPath(join(repo, 'dist', 'src', 'main', 'core', 'gpu', 'nvml.js')).replaceAll('\\', '/')}`;
    wine = winePrefix();
    const r = await windowsNodeJson<{ koffi: boolean; support: { available: boolean; why: string }; readings: unknown; procs: unknown }>(wine, [winPath(script), winPath(work), nvml], 'nvml-check');
    assert.equal(r.koffi, true, 'koffi loaded and called into kernel32: the absence below is NVML’s, not koffi’s');
    assert.deepEqual(r.support, { available: false, why: "NVIDIA's NVML (nvml.dll) is not here: auto-pause sees processes on NVIDIA GPUs only" });
    assert.equal(r.readings, null);
    assert.equal(r.procs, null);
    rmSync(work, { recursive: true, force: true });
  });
});
