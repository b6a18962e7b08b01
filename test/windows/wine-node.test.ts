import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildWindows } from '../../src/main/core/llama/build-windows.js';
import { pathLengthProblem } from '../../src/main/core/node/cache/windows-files.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { mintToken } from '../helpers/node.js';
import { until } from '../helpers/proc.js';
import { inPrefix, startWineNode, winePids, winPath, winePrefix, type WinePrefix } from '../helpers/wine.js';

/**
 * A Windows PC joins the pool, as closely as these Linux machines allow: a Linux hub, and `relay up` run by
 * Node.js for Windows under Wine with the cross-built llama-server.exe. The node joins over the hub's pinned
 * certificate, receives a push (its copy hashes to what the hub registered), serves a node replica whose text
 * equals a Linux llama-server's at temperature 0, stops it when paused, and serves a shard stage: its
 * ggml-rpc-server.exe holds layers of a model neither machine fits alone, for the hub's llama-server through
 * the tunnel. The hub has a CPU budget (600 MB) too small for either model, so each must use the Windows node.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];
const TOKENS = 16;

let hub: HubProcess;
let wine: WinePrefix;
let node: Awaited<ReturnType<typeof startWineNode>>;

before(
  async () => {
    const winBin = await buildWindows({ progress: (l) => console.error(`[llama win64] ${l}`) });
    wine = winePrefix();
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '600'] });
    // 500 MB of weights need about 900 MB on one device: the node (1000) holds it, the hub (600) does not.
    await addModel(hub, { path: fixture('dense'), name: 'small', required_vram_mb: 500 });
    // 700 MB need about 1100 MB: no machine alone; the hub's one layer (565 MB) + the node's three (926 MB) do.
    await addModel(hub, { path: fixture('dense', 2), name: 'big', required_vram_mb: 700 });
    node = await startWineNode(wine, hub, { name: 'gaming-pc', token: await mintToken(hub), winBin, cpuBudgetMb: 1000, env: ENV });
  },
  { timeout: 1_800_000 }, // a fresh machine cross-builds first
);
after(async () => {
  await wine?.close();
  await hub?.stop();
});

const post = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('a Windows node (Node.js for Windows under Wine)', { timeout: 600_000 }, () => {
  it("joins with the hub's certificate pinned and reports its devices", async () => {
    const settings = JSON.parse(readFileSync(join(node.home, 'node.json'), 'utf8')) as { hubCert: string | null; credential: string };
    assert.match(settings.hubCert ?? '', /BEGIN CERTIFICATE/, 'the hub certificate from the join token is pinned');
    const s = await hub.status();
    const n = s.nodes.find((x) => x.name === 'gaming-pc');
    assert.deepEqual([n?.connected, n?.state], [true, 'idle']);
    assert.deepEqual(
      n?.devices.map((d) => [d.id, d.total_mb]),
      [['CPU', 1000]],
    );
  });

  it("receives the push, hash-checked, and serves a replica whose text equals a Linux llama-server's", async () => {
    const want = await directTexts(fixture('dense'), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const prompt of PROMPTS) {
      const r = await post('/v1/completions', { model: 'small', prompt, max_tokens: TOKENS, temperature: 0 });
      assert.equal(r.status, 200, await r.clone().text());
      got.push(((await r.json()) as { choices: { text: string }[] }).choices[0]!.text);
    }
    assert.deepEqual(got, want);
    const s = await hub.status();
    const rep = s.replicas.find((r) => r.model === 'small')!;
    assert.deepEqual([rep.where, rep.node], ['node', 'gaming-pc']);
    const model = s.models.find((m) => m.name === 'small')!;
    const copy = readFileSync(join(node.home, 'cache', 'models', `${model.sha256}.gguf`));
    assert.equal(createHash('sha256').update(copy).digest('hex'), model.sha256, "the node's copy hashes to what the hub registered");
    // Files on Windows (windows-files.ts): renamed out of partial/ into models/, at a path llama-server.exe can open.
    assert.ok(!existsSync(join(node.home, 'cache', 'partial', `${model.sha256}.part`)), 'the verified push was renamed into place');
    assert.equal(pathLengthProblem(winPath(node.home), 'win32'), null);
  });

  it('pausing it stops its llama-server.exe; resuming lets it serve again', async () => {
    const exes = () => winePids('llama-server.exe', winPath(node.home));
    assert.equal(exes().length, 1, 'one llama-server.exe runs from the node');
    const pr = await post('/api/nodes/gaming-pc/pause', {});
    assert.equal(pr.status, 200, `${await pr.text()}\n${node.log().slice(-2000)}`);
    const paused = await until(
      () => hub.status(),
      (s) => s.nodes.find((n) => n.name === 'gaming-pc')?.state === 'paused' && !s.replicas.some((r) => r.node === 'gaming-pc'),
      60_000,
    );
    assert.equal(paused.nodes.find((n) => n.name === 'gaming-pc')?.state, 'paused');
    assert.deepEqual(await until(exes, (p) => p.length === 0, 30_000), [], 'its llama-server.exe is gone');
    const r = await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 });
    assert.equal(r.status, 503, 'nothing else can serve it');
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'pool_busy');
    assert.equal((await post('/api/nodes/gaming-pc/resume', {})).status, 200);
    await until(
      () => hub.status(),
      (s) => s.nodes.find((n) => n.name === 'gaming-pc')?.state === 'idle',
      60_000,
    );
    assert.equal((await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 })).status, 200);
  });

  it('serves a shard stage: its ggml-rpc-server.exe holds layers for the hub; the same text as a Linux llama-server', async () => {
    const want = await directTexts(fixture('dense', 2), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const prompt of PROMPTS) {
      const r = await post('/v1/completions', { model: 'big', prompt, max_tokens: TOKENS, temperature: 0 });
      assert.equal(r.status, 200, `${await r.clone().text()}\n${node.log().slice(-3000)}`);
      got.push(((await r.json()) as { choices: { text: string }[] }).choices[0]!.text);
    }
    assert.deepEqual(got, want);
    const sh = (await hub.status()).shards.find((x) => x.model === 'big')!;
    assert.equal(sh.state, 'ready');
    assert.deepEqual(
      sh.stages.map((st) => [st.node, st.layers, st.output]),
      [
        [null, [0, 1], true],
        ['gaming-pc', [1, 4], false],
      ],
    );
    const stage = sh.stages.find((st) => st.node === 'gaming-pc')!;
    assert.ok(
      sh.buffers.some((b) => b.includes(`RPC0[${stage.rpc_endpoint}] model buffer size`)),
      `the weights went to the Windows stage (${stage.rpc_endpoint}):\n${sh.buffers.join('\n')}`,
    );
    assert.ok((stage.rpc_bytes ?? 0) > 0, 'the stage was reached through the tunnel');
    const rpcs = () => winePids('ggml-rpc-server.exe', '--port').filter((pid) => inPrefix(pid, wine.dir));
    assert.equal(rpcs().length, 1, 'one ggml-rpc-server.exe runs from the node');
    // 'small' again: the idle shard makes way, and the node stops its ggml-rpc-server.exe.
    assert.equal((await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 })).status, 200);
    assert.deepEqual(await until(rpcs, (p) => p.length === 0, 30_000), [], 'its ggml-rpc-server.exe is gone');
    assert.ok(!(await hub.status()).shards.some((x) => x.model === 'big' && x.state === 'ready'));
  });

  it("when its agent is killed, its llama-server.exe goes too (Node's Job Object on Windows)", async () => {
    assert.equal((await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 })).status, 200);
    const exes = () => winePids('llama-server.exe', winPath(node.home));
    assert.equal(exes().length, 1, 'its llama-server.exe runs');
    node.proc.child.kill('SIGKILL'); // no handler runs: only the job libuv put the child in can end it
    await node.proc.exited;
    assert.deepEqual(await until(exes, (p) => p.length === 0, 30_000), [], 'no llama-server.exe outlives the agent');
  });
});
