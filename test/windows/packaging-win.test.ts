import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BACKEND_PACKAGES } from '../../src/main/core/llama/backend-choice.js';
import { shippedModulesIn } from '../../src/main/core/llama/backends.js';
import { buildWindows, MINGW } from '../../src/main/core/llama/build-windows.js';
import { binariesIn } from '../../src/main/core/llama/install.js';
import { windowsNodeJson, winPath, winePrefix, type WinePrefix } from '../helpers/wine.js';

/**
 * `npm run dist -- --win --dir` on Linux: electron-builder's win `dir` target with this repo's
 * electron-builder.yml, whose beforePack hook (scripts/stage-llama.mjs) stages the cross-built Windows binaries
 * (`relay llama build --windows`, cached), the prebuilt Windows Vulkan module and koffi's Windows module.
 * Electron's Windows zip cannot be downloaded here, so electronDist is a stand-in: a real Windows program
 * compiled with mingw-w64 and carrying a version resource, because electron-builder edits it (the asar integrity
 * resource). `win.signAndEditExecutable: false`: rcedit (icon, version strings) is one more download, run
 * under Wine on Linux. The NSIS installer needs NSIS, downloaded too: only the layout is built here.
 */
const repo = new URL('../../../', import.meta.url).pathname;
const asar = createRequire(import.meta.url)('@electron/asar') as { listPackage(p: string): string[]; extractAll(p: string, dest: string): void };
const work = mkdtempSync(join(tmpdir(), 'relay-pack-win-'));
const out = join(work, 'out');
const resources = join(out, 'win-unpacked', 'resources');
const llamaDir = join(resources, 'llama');
let winBin: string;
let wine: WinePrefix;
let system32: string;

const STANDIN_C = '#include <stdio.h>\nint main(void) { puts("stand-in for Electron\'s binary"); return 0; }\n';
const STANDIN_RC = `1 VERSIONINFO
FILEVERSION 45,5,0,0
PRODUCTVERSION 45,5,0,0
BEGIN
  BLOCK "StringFileInfo"
  BEGIN
    BLOCK "040904b0"
    BEGIN
      VALUE "FileDescription", "stand-in for Electron's binary"
      VALUE "ProductVersion", "45.5.0"
    END
  END
  BLOCK "VarFileInfo"
  BEGIN
    VALUE "Translation", 0x409, 1200
  END
END
`;

function ok(r: ReturnType<typeof spawnSync>, what: string): void {
  assert.equal(r.status, 0, `${what}: ${r.stdout?.toString() ?? ''}\n${r.stderr?.toString() ?? ''}`);
}

/** The DLLs a Windows program or DLL imports (its PE import table), lower-cased. */
function imports(file: string): string[] {
  const dump = spawnSync('x86_64-w64-mingw32-objdump', ['-p', file], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
  return [...dump.matchAll(/DLL Name: (\S+)/g)].map((m) => m[1]!.toLowerCase());
}

const isPe = (file: string): boolean => readFileSync(file).subarray(0, 2).toString('latin1') === 'MZ';

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

before(
  async () => {
    winBin = await buildWindows({ progress: (l) => console.error(`[llama win64] ${l}`) });
    const standIn = join(work, 'electron-dist');
    mkdirSync(standIn, { recursive: true });
    writeFileSync(join(work, 'standin.c'), STANDIN_C);
    writeFileSync(join(work, 'standin.rc'), STANDIN_RC);
    ok(spawnSync(MINGW.windres, [join(work, 'standin.rc'), '-O', 'coff', '-o', join(work, 'standin.res.o')]), 'windres');
    ok(spawnSync(MINGW.cc, ['-O2', '-s', '-o', join(standIn, 'electron.exe'), join(work, 'standin.c'), join(work, 'standin.res.o')]), 'the stand-in electron.exe');
    writeFileSync(join(standIn, 'version'), '45.5.0');
    // What `npm run dist -- --win --dir` runs after `npm run build`: the binaries come from the cache, as there.
    const env: NodeJS.ProcessEnv = { ...process.env, ELECTRON_SKIP_BINARY_DOWNLOAD: '1', CSC_IDENTITY_AUTO_DISCOVERY: 'false' };
    delete env.RELAY_LLAMA_BIN_DIR;
    const eb = spawnSync(
      join(repo, 'node_modules', '.bin', 'electron-builder'),
      ['--win', 'dir', '--x64', `-c.electronDist=${standIn}`, `-c.directories.output=${out}`, '-c.win.signAndEditExecutable=false'],
      { cwd: repo, encoding: 'utf8', env, timeout: 600_000 },
    );
    ok(eb, 'electron-builder --win dir');
    wine = winePrefix();
    spawnSync('wine', ['cmd', '/c', 'exit'], { env: wine.env, stdio: 'ignore', timeout: 120_000 });
    system32 = join(wine.dir, 'drive_c', 'windows', 'system32');
  },
  { timeout: 1_800_000 }, // a fresh machine cross-builds first (about 7 minutes on 2 cores; cached after)
);
after(async () => {
  await wine?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('packaging (electron-builder, win dir target, on Linux)', { timeout: 600_000 }, () => {
  it('resources/llama holds the cross-built programs and every DLL they and the Vulkan module import', () => {
    const shipped = readdirSync(llamaDir);
    for (const f of ['llama-server.exe', 'ggml-rpc-server.exe']) {
      assert.ok(shipped.includes(f), `${f} shipped`);
      assert.ok(readFileSync(join(llamaDir, f)).equals(readFileSync(join(winBin, f))), `${f} is the cross-build`);
    }
    const own = new Set(shipped.map((f) => f.toLowerCase()));
    const modules = Object.values(shippedModulesIn(join(llamaDir, 'backends'), BACKEND_PACKAGES, 'win32'));
    for (const f of [...shipped.filter((x) => /\.(exe|dll)$/i.test(x)).map((x) => join(llamaDir, x)), ...modules]) {
      const needs = imports(f);
      assert.ok(needs.length > 0, `${f} imports something`);
      // Windows looks beside the program first; what is not there must be one of Windows' own (Wine has them), or
      // an API set (api-ms-win-crt-*: the universal C runtime, part of Windows 10 and later), which the loader maps.
      const system = (d: string): boolean => d.startsWith('api-ms-win-') || existsSync(join(system32, d));
      for (const d of needs) assert.ok(own.has(d) || system(d), `${f} imports ${d}: neither shipped nor a Windows DLL`);
    }
  });

  it('holds no Linux binaries: every file in resources/llama and resources/koffi is a Windows one', () => {
    const files = [...walk(llamaDir), ...walk(join(resources, 'koffi'))];
    assert.ok(files.length > 10, files.join('\n'));
    for (const f of files) {
      assert.ok(!/\.so(\.\d+)*$/.test(f), `${f} is a Linux library`);
      assert.ok(isPe(f), `${f} is not a Windows program or DLL`);
    }
    const stage = JSON.parse(readFileSync(join(repo, '.dist-llama', 'win-x64', 'stage.json'), 'utf8')) as { platform: string; from: string };
    assert.equal(stage.platform, 'win32');
    assert.equal(stage.from, winBin);
  });

  it("the app's own lookup finds them: resources/llama as RELAY_LLAMA_BIN_DIR on win32, and the shipped Vulkan module", () => {
    // main.ts: a packaged app runs with RELAY_LLAMA_BIN_DIR = <resourcesPath>/llama; findLlama takes the programs from binariesIn.
    assert.deepEqual(binariesIn(llamaDir, 'win32'), { serverPath: join(llamaDir, 'llama-server.exe'), rpcServerPath: join(llamaDir, 'ggml-rpc-server.exe') });
    const vk = BACKEND_PACKAGES.find((p) => p.platform === 'win32' && p.backend === 'vulkan')!;
    assert.deepEqual(shippedModulesIn(join(llamaDir, 'backends'), BACKEND_PACKAGES, 'win32'), { [vk.id]: join(llamaDir, 'backends', vk.id, 'ggml-vulkan.dll') });
  });

  it('native node modules are the Windows ones: koffi under resources/koffi, bufferutil from its win32-x64 prebuild', () => {
    assert.ok(isPe(join(resources, 'koffi', 'win32_x64', 'koffi.node')), 'koffi.node for win32_x64');
    const files = new Set(asar.listPackage(join(resources, 'app.asar')).map((f) => f.replace(/\\/g, '/')));
    assert.ok(files.has('/node_modules/koffi/package.json'), 'koffi packed');
    assert.ok(isPe(join(resources, 'app.asar.unpacked', 'node_modules', 'bufferutil', 'prebuilds', 'win32-x64', 'bufferutil.node')), 'bufferutil win32-x64 unpacked');
    assert.ok(![...files].some((f) => f.startsWith('/node_modules/bufferutil/build')), "no bufferutil build/ of this machine's (node-gyp-build would try it first)");
  });

  it("under Wine, Windows' Node.js loads koffi from the packed app and finds its native module through resourcesPath", async () => {
    const app = join(work, 'app');
    asar.extractAll(join(resources, 'app.asar'), app);
    const script = join(work, 'koffi-check.cjs');
    writeFileSync(
      script,
      [
        // Electron sets process.resourcesPath; node.exe stands in for Electron's Node here.
        'process.resourcesPath = process.argv[2];',
        'const koffi = require(process.argv[3]);',
        "const pid = koffi.load('kernel32.dll').func('uint32_t __stdcall GetCurrentProcessId(void)');",
        'console.log(JSON.stringify({ koffi: koffi.version, pid: pid(), nodePid: process.pid }));',
      ].join('\n'),
    );
    const r = await windowsNodeJson<{ koffi: string; pid: number; nodePid: number }>(wine, [winPath(script), winPath(resources), winPath(join(app, 'node_modules', 'koffi'))], 'koffi-check');
    assert.equal(r.pid, r.nodePid, 'a call through koffi into kernel32 answered');
  });

  it('under Wine, the packed llama-server.exe runs and loads the shipped Vulkan module beside its mingw ggml-base.dll', async () => {
    const v = await wine.run(join(llamaDir, 'llama-server.exe'), ['--version'], 'packed-version');
    assert.equal(v.code, 0, v.output);
    assert.match(v.output, /version: \d+/);
    const vk = BACKEND_PACKAGES.find((p) => p.platform === 'win32' && p.backend === 'vulkan')!;
    const module = join(llamaDir, 'backends', vk.id, 'ggml-vulkan.dll');
    const d = await wine.run(join(llamaDir, 'llama-server.exe'), ['--list-devices'], 'packed-devices', { env: { GGML_BACKEND_PATH: winPath(module), GGML_VK_VISIBLE_DEVICES: '0' } });
    assert.equal(d.code, 0, d.output);
    const text = d.output;
    // Loaded (its imports resolved against relay's ggml-base.dll and Wine's MSVC runtime) and initialised: it
    // either lists a Vulkan device or stops at its own Vulkan check. Wine 8's Vulkan needs its X11 driver, and
    // these machines have no X server, so here it is the second (docs/how-it-works.md#windows).
    assert.doesNotMatch(text, /failed to load|LoadLibrary|error 126/i);
    assert.match(text, /Vulkan\d|ggml_vulkan: /, text);
  });
});
