import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLlamaServer } from '../../src/main/core/llama/index.js';
import { addModel } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { chat } from '../helpers/openai.js';
import { startRegistry } from '../helpers/npm-registry.js';
import { binaryPackageName } from '../../src/main/core/app-files.js';
import { BUILD_OR_FETCH, lines, releaseBuild, type ReleaseBuild } from '../helpers/release.js';

/**
 * The npm form: the package `npm run release` packs (`relay-llm`, command `relay`), with its binary packages
 * (llama.cpp built elsewhere, one per platform, esbuild's way) served by a stand-in registry as npm will find them
 * once published; `npm install -g` of the package alone into a prefix outside the checkout brings this platform's. `relay hub` then runs with a PATH holding Node.js alone (no cmake, compiler or git) and a fresh HOME:
 * it serves with the llama.cpp of the binary package and builds nothing.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'info' };

function listed(tgz: string): string[] {
  return spawnSync('tar', ['-tzf', tgz], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .stdout.trim()
    .split('\n');
}

describe('the npm package, installed globally from its packed tarballs', { timeout: 2_400_000 }, () => {
  let build: ReleaseBuild;
  let work: string;
  let prefix: string;
  let hub: ChildProcess | undefined;

  before(async () => {
    build = await releaseBuild();
    work = mkdtempSync(join(tmpdir(), 'relay-npm-'));
    prefix = join(work, 'prefix');
  }, { timeout: 1_800_000 }); // a fresh machine cross-builds llama.cpp for Windows and builds the release first
  after(() => {
    hub?.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  });

  it('the package holds what runs (compiled code, the command, the dashboard) and no tests, sources or maps; its optional dependencies are the binary packages of its version', () => {
    const files = listed(build.npm.main);
    for (const f of ['package/bin/relay.js', 'package/dist/src/main/cli/index.js', 'package/dist/src/main/core/gguf/worker.js', 'package/src/renderer/index.html', 'package/package.json', 'package/LICENSE']) assert.ok(files.includes(f), f);
    assert.deepEqual(
      files.filter((f) => /\.map$|\.ts$|^package\/(test|bench|scripts|docs)\//.test(f)),
      [],
    );
    const manifest = JSON.parse(spawnSync('tar', ['-xzOf', build.npm.main, 'package/package.json'], { encoding: 'utf8' }).stdout) as { name: string; version: string; bin: Record<string, string>; optionalDependencies: Record<string, string>; private?: boolean };
    assert.deepEqual(
      [manifest.name, manifest.bin, manifest.private],
      ['relay-llm', { relay: 'bin/relay.js' }, undefined],
    );
    assert.deepEqual(manifest.optionalDependencies, { [binaryPackageName('linux', 'x64')]: manifest.version, [binaryPackageName('win32', 'x64')]: manifest.version });
    const bin = listed(build.npm.linux);
    for (const f of ['package/llama/llama-server', 'package/llama/ggml-rpc-server', 'package/llama/libggml-cpu.so', 'package/llama/backends/vulkan/libggml-vulkan.so']) assert.ok(bin.includes(f), f);
  });

  it('npm install -g relay-llm (from a registry) brings the binary package of this platform by itself; its `relay hub` serves without building llama.cpp', async () => {
    // The two packages as the registry will serve them once published: npm resolves the optional dependency by os/cpu.
    const registry = await startRegistry([build.npm.linux, build.npm.windows]);
    // Not spawnSync: the registry answers from this process's event loop.
    const install = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const p = spawn('npm', ['install', '-g', '--prefix', prefix, '--registry', `${registry.url}/`, '--no-audit', '--no-fund', build.npm.main], { cwd: work, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      p.once('close', (code) => resolve({ code, stderr }));
    }).finally(() => registry.close());
    assert.equal(install.code, 0, install.stderr);
    assert.ok(registry.requests.includes('/relay-llm-linux-x64'), 'the optional dependency was looked up in the registry');
    const installed = join(prefix, 'lib', 'node_modules', 'relay-llm', 'node_modules');
    assert.ok(existsSync(join(installed, 'relay-llm-linux-x64', 'llama', 'llama-server')), "this platform's binary package was installed");
    assert.ok(!existsSync(join(installed, 'relay-llm-win32-x64')), 'the Windows one was not (another os)');
    const relay = join(prefix, 'bin', 'relay');
    assert.ok(existsSync(relay));
    // Node.js alone on the PATH: a build would need cmake, a compiler and git.
    const onlyNode = join(work, 'only-node');
    mkdirSync(onlyNode);
    symlinkSync(process.execPath, join(onlyNode, 'node'));
    hub = spawn(relay, ['hub', '--port', '0', '--cpu-budget-mb', '1000'], { cwd: work, env: { HOME: join(work, 'home'), PATH: onlyNode, ...ENV }, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = lines(hub);
    const url = (await out.waitFor(/^\s+\/v1\s+http/)).trim().split(/\s+/)[1]!.replace(/\/v1$/, '');
    await addModel({ url }, { path: fixture('dense'), name: 'dense' });
    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      assert.equal((await chat(url, 'Tell me about the sea.', 24, 'dense')).text, (await chat(direct.baseUrl, 'Tell me about the sea.')).text);
    } finally {
      await direct.child.terminate(5000);
    }
    const binDir = join(prefix, 'lib', 'node_modules', 'relay-llm', 'node_modules', 'relay-llm-linux-x64', 'llama');
    assert.ok(out.all.some((l) => l.includes('llama.cpp shipped with relay') && l.includes(`"llama":"${binDir}"`)), out.all.join('\n'));
    assert.ok(!out.all.some((l) => BUILD_OR_FETCH.test(l)), 'no build step, no download');
    assert.ok(!existsSync(join(work, 'home', '.cache', 'relay', 'llama.cpp')), 'no llama.cpp cache was made');
  });
});
