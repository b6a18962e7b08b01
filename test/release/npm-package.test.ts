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
import { BUILD_OR_FETCH, lines, releaseBuild, type ReleaseBuild } from '../helpers/release.js';

/**
 * The npm form: the package `npm run release` packs (`relay-llm`, command `relay`) and its binary package for this
 * platform (llama.cpp built elsewhere, esbuild's way), installed with `npm install -g` into a prefix outside the
 * checkout. `relay hub` then runs with a PATH holding Node.js alone (no cmake, compiler or git) and a fresh HOME:
 * it serves with the llama.cpp of the binary package and builds nothing.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'info' };

function listed(tgz: string): string[] {
  return spawnSync('tar', ['-tzf', tgz], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .stdout.trim()
    .split('\n');
}

describe('the npm package, installed globally from its packed tarballs', { timeout: 600_000 }, () => {
  let build: ReleaseBuild;
  let work: string;
  let prefix: string;
  let hub: ChildProcess | undefined;

  before(async () => {
    build = await releaseBuild();
    work = mkdtempSync(join(tmpdir(), 'relay-npm-'));
    prefix = join(work, 'prefix');
  });
  after(() => {
    hub?.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  });

  it('the package holds what runs (compiled code, the command, the dashboard) and no tests, sources or maps', () => {
    const files = listed(build.npm.main);
    for (const f of ['package/bin/relay.js', 'package/dist/src/main/cli.js', 'package/dist/src/main/core/gguf/worker.js', 'package/src/renderer/index.html', 'package/package.json', 'package/LICENSE']) assert.ok(files.includes(f), f);
    assert.deepEqual(
      files.filter((f) => /\.map$|\.ts$|^package\/(test|bench|scripts|docs)\//.test(f)),
      [],
    );
    const bin = listed(build.npm.linux);
    for (const f of ['package/llama/llama-server', 'package/llama/ggml-rpc-server', 'package/llama/libggml-cpu.so', 'package/llama/backends/vulkan/libggml-vulkan.so']) assert.ok(bin.includes(f), f);
  });

  it('npm install -g of both tarballs gives a `relay` whose hub serves without building llama.cpp', async () => {
    const install = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', build.npm.main, build.npm.linux], { cwd: work, encoding: 'utf8', timeout: 300_000 });
    assert.equal(install.status, 0, install.stderr);
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
    const binDir = join(prefix, 'lib', 'node_modules', 'relay-llm-linux-x64', 'llama');
    assert.ok(out.all.some((l) => l.includes('llama.cpp shipped with relay') && l.includes(`"llama":"${binDir}"`)), out.all.join('\n'));
    assert.ok(!out.all.some((l) => BUILD_OR_FETCH.test(l)), 'no build step, no download');
    assert.ok(!existsSync(join(work, 'home', '.cache', 'relay', 'llama.cpp')), 'no llama.cpp cache was made');
  });
});
