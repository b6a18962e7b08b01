import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TRAY_ICONS } from '../../src/main/app/tray-menu.js';
import { chooseBackend, findLlama, readVersion } from '../../src/main/core/llama/install.js';
import { lavapipeEnv, llama } from '../helpers/llama.js';

/**
 * `npm run dist`'s steps on the linux `dir` target: electron-builder with this repo's electron-builder.yml, whose
 * beforePack hook (scripts/stage-llama.mjs) stages the llama.cpp binaries for the platform packed. Electron's own binary cannot be downloaded on these machines, so electronDist
 * is a stand-in folder (a shell script named `electron`); everything relay puts into the package is real
 * and checked: the app archive, the files the main process loads from it, the native modules, and the
 * llama.cpp binaries in resources/llama, which must run.
 */
const repo = new URL('../../../', import.meta.url).pathname;
const asar = createRequire(import.meta.url)('@electron/asar') as { listPackage(p: string): string[]; extractFile(p: string, f: string): Buffer };
const work = mkdtempSync(join(tmpdir(), 'relay-pack-'));
const out = join(work, 'out');
const resources = join(out, 'linux-unpacked', 'resources');
let files: Set<string>;

const run = (cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) => spawnSync(cmd, args, { cwd: repo, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 300_000 });

before(() => {
  const standIn = join(work, 'electron-dist');
  rmSync(standIn, { recursive: true, force: true });
  spawnSync('mkdir', ['-p', standIn]);
  writeFileSync(join(standIn, 'electron'), '#!/bin/sh\necho "stand-in for Electron\'s binary"\n');
  chmodSync(join(standIn, 'electron'), 0o755);
  writeFileSync(join(standIn, 'version'), '45.5.0');
  const eb = run(join(repo, 'node_modules', '.bin', 'electron-builder'), ['--linux', 'dir', '-c.electronDist=' + standIn, '-c.directories.output=' + out], {
    ELECTRON_SKIP_BINARY_DOWNLOAD: '1',
    CSC_IDENTITY_AUTO_DISCOVERY: 'false',
    RELAY_LLAMA_BIN_DIR: llama().binDir,
  });
  assert.equal(eb.status, 0, `${eb.stdout}\n${eb.stderr}`);
  files = new Set(asar.listPackage(join(resources, 'app.asar')).map((f) => f.replace(/\\/g, '/')));
});
after(() => rmSync(work, { recursive: true, force: true }));

describe('packaging (electron-builder, linux dir target)', { timeout: 360_000 }, () => {
  it('the app archive holds the main process, preload, pages and every tray icon it loads', () => {
    const pkg = JSON.parse(asar.extractFile(join(resources, 'app.asar'), 'package.json').toString()) as { main: string };
    assert.equal(pkg.main, 'dist/src/main/electron/main.js');
    // main.ts resolves these from the archive's root (../../../../ of main.js).
    for (const f of [
      pkg.main,
      'dist/src/main/electron/preload.cjs',
      'dist/src/main/app/controller.js',
      'src/renderer/setup.html',
      'src/renderer/index.html',
      'assets/icon.png',
      ...TRAY_ICONS.map((i) => `assets/tray-${i}.png`),
    ]) {
      assert.ok(files.has(`/${f}`), `${f} is in app.asar`);
    }
  });

  it('runtime dependencies are packed, dev tooling is not, and native modules are unpacked', () => {
    for (const dep of ['express', 'ws', 'pino', 'lowdb', 'koffi']) assert.ok(files.has(`/node_modules/${dep}/package.json`), `${dep} packed`);
    for (const dev of ['electron', 'electron-builder', 'playwright-core', 'typescript', 'fast-check']) assert.ok(!files.has(`/node_modules/${dev}`), `${dev} not packed`);
    assert.ok(![...files].some((f) => f.startsWith('/test/') || f.endsWith('.map') || f.startsWith('/dist/test/')), 'no tests or source maps');
    // A .node file cannot be loaded from inside an asar: electron-builder must have unpacked koffi's.
    const unpacked = spawnSync('find', [join(resources, 'app.asar.unpacked'), '-name', '*.node', '-path', '*koffi*'], { encoding: 'utf8' }).stdout.trim();
    assert.match(unpacked, /koffi.*linux_x64.*\.node/);
  });

  it('resources/llama holds the llama.cpp binaries, and they run', () => {
    for (const bin of ['llama-server', 'ggml-rpc-server']) {
      const p = join(resources, 'llama', bin);
      assert.ok(existsSync(p), `${bin} shipped`);
      assert.ok((statSync(p).mode & 0o111) !== 0, `${bin} executable`);
      assert.equal(readFileSync(p).equals(readFileSync(join(llama().binDir, bin))), true, `${bin} is the staged build`);
    }
    assert.equal(readVersion(join(resources, 'llama', 'llama-server')), llama().version, 'the shipped llama-server runs');
    assert.deepEqual(
      readdirSync(join(resources, 'llama')).filter((f) => /\.(exe|dll)$/i.test(f)),
      [],
      'no Windows files in a Linux package',
    );
    // The $ORIGIN layout: every library resolves inside the package, none from the build cache.
    const ldd = spawnSync('ldd', [join(resources, 'llama', 'llama-server')], { encoding: 'utf8' }).stdout;
    assert.match(ldd, /libggml-base\.so => .*linux-unpacked\/resources\/llama\/libggml-base\.so/);
    assert.equal(/not found|\.cache\/relay/.test(ldd), false, ldd);
  });

  it('the shipped Vulkan module is picked from inside the package and lists the GPU (lavapipe here)', async () => {
    const module = join(resources, 'llama', 'backends', 'vulkan', 'libggml-vulkan.so');
    assert.ok(existsSync(module), 'libggml-vulkan.so shipped');
    const env = { ...process.env, ...lavapipeEnv(), RELAY_LLAMA_BIN_DIR: join(resources, 'llama') };
    const shipped = findLlama({ env })!;
    const { install, resolution } = await chooseBackend(shipped, { choice: 'auto', env });
    assert.equal(install.backend, 'vulkan');
    assert.equal(install.backendModule, module);
    assert.equal(resolution.from, 'shipped');
    assert.deepEqual(
      resolution.devices.map((d) => d.name),
      ['Vulkan0'],
    );
  });

  it('stage-llama refuses clearly when there are no binaries to ship', () => {
    const r = run(process.execPath, ['scripts/stage-llama.mjs'], { RELAY_LLAMA_BIN_DIR: join(work, 'nothing-here') });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /stage-llama: the llama.cpp folder .*nothing-here has no/);
  });
});
