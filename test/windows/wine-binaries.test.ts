import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildWindows, MINGW_RUNTIME } from '../../src/main/core/llama/build-windows.js';
import { llamaServerArgv, rpcServerArgv } from '../../src/main/core/llama/argv.js';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { directTexts, fixture, llama } from '../helpers/llama.js';
import { complete } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { freePort, waitHealthy, winPath, winePrefix, type WinePrefix } from '../helpers/wine.js';

/**
 * The Windows binaries (issue "A Windows gaming PC joins the pool", item 1): cross-built here from the same
 * pinned source with mingw-w64 (`relay llama build --windows`, cached like the Linux build), then run under
 * Wine. The oracle is the Linux build: the same model, prompt and greedy sampling give the same text, whether
 * llama-server.exe serves the whole model or ggml-rpc-server.exe holds its layers for a Linux llama-server
 * (a Windows node's shard stage).
 */
const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];
const TOKENS = 16;

let bin: string;
let wine: WinePrefix;
const stops: (() => Promise<unknown>)[] = [];

before(
  async () => {
    bin = await buildWindows({ progress: (l) => console.error(`[llama win64] ${l}`) });
    wine = winePrefix();
  },
  { timeout: 1_800_000 }, // a fresh machine cross-builds first (about 7 minutes on 2 cores; cached after)
);
after(async () => {
  for (const s of stops) await s();
  await wine?.close();
});

describe('Windows binaries under Wine', { timeout: 600_000 }, () => {
  it("ship what they import: every DLL is beside them or one of Windows' own (Wine provides those)", () => {
    const files = readdirSync(bin);
    for (const f of ['llama-server.exe', 'ggml-rpc-server.exe', 'ggml-base.dll', 'ggml-cpu.dll', 'ggml-rpc.dll', ...MINGW_RUNTIME]) assert.ok(files.includes(f), `${f} in ${bin}`);
    // Wine's system folder holds its builtin stand-ins of Windows' DLLs once the prefix exists.
    spawnSync('wine', ['cmd', '/c', 'exit'], { env: wine.env, stdio: 'ignore', timeout: 120_000 });
    const system32 = join(wine.dir, 'drive_c', 'windows', 'system32');
    const own = new Set(files.map((f) => f.toLowerCase()));
    for (const f of files.filter((x) => /\.(exe|dll)$/.test(x))) {
      const dump = spawnSync('x86_64-w64-mingw32-objdump', ['-p', join(bin, f)], { encoding: 'utf8' }).stdout;
      const imports = [...dump.matchAll(/DLL Name: (\S+)/g)].map((m) => m[1]!.toLowerCase());
      assert.ok(imports.length > 0, `${f} imports something`);
      for (const d of imports) assert.ok(own.has(d) || existsSync(join(system32, d)), `${f} imports ${d}: neither shipped nor a Windows DLL`);
    }
  });

  it('llama-server.exe --version and --list-devices end by themselves (relay reads both at start)', async () => {
    for (const args of [['--version'], ['--list-devices']]) {
      // Generous: the point is that it exits at all (it used to print and then hang at exit).
      const { code, output } = await wine.run(join(bin, 'llama-server.exe'), args, `llama-server-${args[0]!.slice(2)}`, { limitMs: 60_000 });
      assert.equal(code, 0, `${args[0]} exited ${code}:\n${output}`);
      assert.match(output, args[0] === '--version' ? /version: \d+/ : /Available devices/);
    }
  });

  it("llama-server.exe answers with the Linux build's text at temperature 0", async () => {
    const model = fixture('dense');
    const want = await directTexts(model, PROMPTS, TOKENS);
    const port = await freePort();
    const args = llamaServerArgv({ model: winPath(model), host: '127.0.0.1', port, ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    const p = wine.start(join(bin, 'llama-server.exe'), args, 'llama-server');
    stops.push(() => p.stop());
    const base = `http://127.0.0.1:${port}`;
    await waitHealthy(p, base);
    const got: string[] = [];
    for (const prompt of PROMPTS) got.push((await complete(base, prompt, TOKENS)).text);
    assert.deepEqual(got, want);
    assert.ok(want.every((t) => t.length > 0));
    await p.stop();
  });

  it('ggml-rpc-server.exe holds every layer for a Linux llama-server: the same text (a Windows shard stage)', async () => {
    const model = fixture('dense');
    const want = await directTexts(model, PROMPTS, TOKENS);
    const port = await freePort();
    const rpc = wine.start(join(bin, 'ggml-rpc-server.exe'), rpcServerArgv({ host: '127.0.0.1', port, cache: false, threads: 1 }), 'rpc-server');
    stops.push(() => rpc.stop());
    // It listens once its CPU backend is up.
    const listening = () =>
      new Promise<boolean>((r) => {
        const c = connect(port, '127.0.0.1', () => {
          c.destroy();
          r(true);
        });
        c.on('error', () => r(false));
      });
    assert.ok(await until(listening, (v) => v, 120_000, 250), `ggml-rpc-server.exe did not listen:\n${rpc.output()}`);
    const s: RunningLlamaServer = await startLlamaServer(llama(), {
      model,
      ctx: 512,
      slots: 1,
      cacheType: 'f16',
      threads: 1,
      rpc: [`127.0.0.1:${port}`],
      devices: ['RPC0'],
      gpuLayers: 99,
      name: 'linux-head',
    });
    stops.push(() => s.child.terminate(5000));
    const got: string[] = [];
    for (const prompt of PROMPTS) got.push((await complete(s.baseUrl, prompt, TOKENS)).text);
    assert.deepEqual(got, want);
    assert.ok(
      s.child.output().some((l) => /RPC0\[127\.0\.0\.1:\d+\] model buffer size/.test(l)),
      'the weights went to the Windows rpc server',
    );
  });
});
