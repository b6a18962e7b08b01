import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildWindows } from '../../src/main/core/llama/build-windows.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture, lavapipeEnv } from '../helpers/llama.js';
import { mintToken } from '../helpers/node.js';
import { signalIfRunning } from '../helpers/proc.js';
import { startWineNode, winePrefix, winPath, type WinePrefix } from '../helpers/wine.js';

/**
 * A Windows node's GPU through the Windows Vulkan loader (issue "A Windows gaming PC joins the pool", item 4):
 * `relay up` under Wine, its llama folder laid out as the packaged app's (the cross-built binaries and
 * `backends/<package id>/ggml-vulkan.dll`, the prebuilt Windows module), `--backend vulkan`. Wine forwards
 * Vulkan to this machine's driver, Mesa's lavapipe, through its X11 driver: so an Xvfb display
 * (LLAMA-NOTES). The node must choose the module by its own rule, report Vulkan0 to the hub, and serve a
 * replica on it whose text equals a Linux llama-server's on the CPU at temperature 0.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];
const TOKENS = 16;

let hub: HubProcess;
let wine: WinePrefix;
let xvfb: ChildProcess | null = null;
let node: Awaited<ReturnType<typeof startWineNode>>;

/** An X display of its own for this file's Wine programs (Xvfb: Debian's xvfb, installed by scripts/install-deps.sh). */
async function startXvfb(): Promise<string> {
  assert.equal(spawnSync('Xvfb', ['-help'], { stdio: 'ignore' }).error, undefined, 'Xvfb is missing: scripts/install-deps.sh installs xvfb');
  for (let n = 90 + (process.pid % 50); ; n++) {
    if (existsSync(`/tmp/.X11-unix/X${n}`) || existsSync(`/tmp/.X${n}-lock`)) continue;
    const p = spawn('Xvfb', [`:${n}`, '-nolisten', 'tcp', '-screen', '0', '640x480x24'], { stdio: 'ignore' });
    const up = await new Promise<boolean>((resolve) => {
      const t = setInterval(() => {
        if (existsSync(`/tmp/.X11-unix/X${n}`)) done(true);
      }, 100);
      const done = (v: boolean): void => {
        clearInterval(t);
        resolve(v);
      };
      p.once('exit', () => done(false));
    });
    if (up) {
      xvfb = p;
      return `:${n}`;
    }
  }
}

before(
  async () => {
    await buildWindows({ progress: (l) => console.error(`[llama win64] ${l}`) });
    // The packaged app's resources, staged as `npm run dist -- --win` stages them (scripts/stage-llama.mjs): llama/
    // with backends/<package id>/ggml-vulkan.dll, and koffi/win32_x64/koffi.node, which koffi finds through
    // Electron's process.resourcesPath — set here by a preload, as Node.js has no such property.
    const stageScript = new URL('../../../scripts/stage-llama.mjs', import.meta.url).href;
    const { stage } = (await import(stageScript)) as { stage: (o: { platform: string; arch: string }) => Promise<{ dir: string }> };
    const resources = (await stage({ platform: 'win32', arch: 'x64' })).dir;
    const preload = join(mkdtempSync(join(tmpdir(), 'relay-winres-')), 'resources-path.cjs');
    writeFileSync(preload, `process.resourcesPath = ${JSON.stringify(winPath(resources))};\n`);
    const display = await startXvfb();
    wine = winePrefix();
    hub = await startHub({ env: ENV }); // no CPU budget: the hub cannot serve, the Windows node's GPU must
    await addModel(hub, { path: fixture('dense'), name: 'small' });
    node = await startWineNode(wine, hub, {
      name: 'gaming-pc',
      token: await mintToken(hub),
      winBin: join(resources, 'llama'),
      nodeArgs: ['-r', winPath(preload)],
      cpuBudgetMb: 0,
      env: { ...ENV, ...lavapipeEnv(), DISPLAY: display, RELAY_LLAMA_BACKEND: 'vulkan' },
    });
  },
  { timeout: 1_800_000 }, // a fresh machine cross-builds first
);
after(async () => {
  await wine?.close();
  await hub?.stop();
  if (xvfb) signalIfRunning(xvfb, 'SIGTERM');
});

describe('a Windows node on Vulkan (the prebuilt Windows module, under Wine on lavapipe)', { timeout: 600_000 }, () => {
  it('chooses the shipped Vulkan module and reports the Vulkan device to the hub', async () => {
    const s = await hub.status();
    const n = s.nodes.find((x) => x.name === 'gaming-pc');
    assert.equal(n?.connected, true);
    const gpu = n?.devices.find((d) => d.id === 'Vulkan0');
    assert.ok(gpu, `the node reports Vulkan0: ${JSON.stringify(n?.devices)}\n${node.log().slice(-3000)}`);
    assert.ok(gpu.total_mb > 0);
    assert.match(node.log(), /win64-vulkan|ggml-vulkan\.dll/, 'its log says which module it chose');
  });

  it("serves a replica on Vulkan0 whose text equals a Linux llama-server's on the CPU", async () => {
    const want = await directTexts(fixture('dense'), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const prompt of PROMPTS) {
      const r = await fetch(`${hub.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'small', prompt, max_tokens: TOKENS, temperature: 0 }),
      });
      assert.equal(r.status, 200, `${await r.clone().text()}\n${node.log().slice(-3000)}`);
      got.push(((await r.json()) as { choices: { text: string }[] }).choices[0]!.text);
    }
    assert.deepEqual(got, want);
    const rep = (await hub.status()).replicas.find((r) => r.model === 'small')!;
    assert.deepEqual([rep.where, rep.node, rep.device], ['node', 'gaming-pc', 'Vulkan0']);
  });
});
