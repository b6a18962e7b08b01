import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ErrorCode } from '../../src/shared/errors.js';
import { cacheRoot, packFromRegistry } from '../../src/main/core/llama/fetch.js';
import { windowsNodeExe, winPath, winePrefix, type WinePrefix } from '../helpers/wine.js';

/**
 * relay's NVML loader (src/main/core/gpu/nvml.ts) run by Node.js for Windows under Wine, which has no nvml.dll:
 * koffi's Windows module loads and calls into kernel32, and NVML is reported absent, naming nvml.dll, with no
 * crash; readings and the auto-pause input are null (callers fall back to nvidia-smi, then --list-devices).
 * A few seconds: no llama.cpp build is needed.
 */
const repo = new URL('../../../', import.meta.url).pathname;

/** koffi's win32-x64 native module, the version package-lock.json pins (the cache folder scripts/stage-llama.mjs uses). */
async function koffiWindowsModule(): Promise<string> {
  const name = '@koromix/koffi-win32-x64';
  const locked = (JSON.parse(readFileSync(join(repo, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version: string; integrity: string }> }).packages[`node_modules/${name}`]!;
  const dir = join(cacheRoot(), 'dist', `koffi-win32-x64-${locked.version}`);
  const file = join(dir, 'win32_x64', 'koffi.node');
  if (existsSync(file)) return file;
  mkdirSync(dir, { recursive: true });
  const tgz = await packFromRegistry(name, locked.version, locked.integrity, dir, (l) => console.error(`[koffi win32] ${l}`), ErrorCode.BACKEND_INTEGRITY);
  spawnSync('tar', ['-xzf', tgz, '-C', dir, '--strip-components=1', 'package/win32_x64/koffi.node'], { stdio: 'inherit' });
  rmSync(tgz, { force: true });
  return file;
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
    const p = wine.start(await windowsNodeExe(), [winPath(script), winPath(work), nvml], 'nvml-check', { NODE_SKIP_PLATFORM_CHECK: '1' });
    assert.equal(await p.exited, 0, p.output());
    const line = p
      .output()
      .split('\n')
      .find((l) => l.startsWith('{'));
    assert.ok(line, p.output());
    const r = JSON.parse(line) as { koffi: boolean; support: { available: boolean; why: string }; readings: unknown; procs: unknown };
    assert.equal(r.koffi, true, 'koffi loaded and called into kernel32: the absence below is NVML’s, not koffi’s');
    assert.deepEqual(r.support, { available: false, why: "NVIDIA's NVML (nvml.dll) is not here: auto-pause sees processes on NVIDIA GPUs only" });
    assert.equal(r.readings, null);
    assert.equal(r.procs, null);
    rmSync(work, { recursive: true, force: true });
  });
});
