import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { mountSmallDisk } from '../helpers/small-disk.js';
import { startLlamaServer } from '../../src/main/core/llama/processes.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * A shard's rpc cache holds the weights only. This ggml-rpc-server saves every tensor over 10 MiB it is sent to
 * its cache, a long prompt's attention masks too: at a 16k context with ubatch 512 the mask passes 10 MiB once
 * about 10,240 tokens are in the cache (n_kv × 512 × 2 bytes), and each further ubatch left another file (one
 * 22,000-token prompt left 368 MB beside 16 MB of weights in a run by hand). The node here holds no copy of the
 * model, so its stage's weights reach the cache by the load itself; the hub says when the load is done
 * (`rpc-loaded`), the node names those files as weights, and from then on removes any other. After several long
 * prompts through a hub + node shard the folder holds the stage's weights and nothing else.
 */
const ENV = { RELAY_CONTEXT_SIZE: '16384', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const TOKENS = 12_000;

describe("a shard's rpc cache after long prompts", { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let node: NodeProcess;

  before(async () => {
    // 900 MB registered need about 1330 on one device: the hub (1000) and the node (1000) each hold a part.
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    node = await startNode(hub, { name: 'attic', cpuBudgetMb: 1000, env: ENV });
    await addModel(hub, { path: fixture('longwide'), name: 'long', required_vram_mb: 900 });
  });
  after(async () => {
    await node?.stop();
    await hub?.stop();
  });

  it('holds only the weights relay filled, whatever the prompts left there', async () => {
    const words = ['garden', 'river', 'stone', 'house', 'light', 'water', 'green'];
    for (const first of [0, 3]) {
      const r = await hub.api<{ usage?: { prompt_tokens: number }; error?: unknown }>('/v1/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'long', prompt: Array.from({ length: TOKENS }, (_, i) => words[(first + i) % words.length]).join(' '), max_tokens: 2, cache_prompt: false }),
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.ok(r.body.usage!.prompt_tokens > 10_240, `${r.body.usage!.prompt_tokens} prompt tokens: enough for masks over 10 MiB`);
    }
    const [sh] = (await hub.status()).shards;
    assert.ok(
      sh?.stages.some((st) => st.node === 'attic'),
      'a shard with a stage on the node',
    );
    const dir = join(node.home, 'cache', 'llama', 'rpc');
    const weights = (): Set<string> =>
      new Set(
        readdirSync(dir)
          .filter((f) => f.startsWith('relay-index-'))
          .flatMap((f) => (JSON.parse(readFileSync(join(dir, f), 'utf8')) as { files: { name: string }[] }).files.map((x) => x.name)),
      );
    // The node prunes on its heartbeat (500 ms here): within a few, nothing but the weights is left.
    const others = await until(
      () => readdirSync(dir).filter((f) => !f.startsWith('relay-index-') && !weights().has(f)),
      (x) => x.length === 0,
      10_000,
      100,
    );
    assert.deepEqual(others, []);
    // What was removed: the masks the rpc-server saved (over 10 MiB each), said in the node's log.
    const removed = node.logs.filter((l) => l.includes('removed what ggml-rpc-server saved beyond the weights')).map((l) => (JSON.parse(l) as { bytes: number }).bytes);
    assert.ok(removed.reduce((a, b) => a + b, 0) > 10 << 20, `removed ${removed.join(', ')} bytes`);
    assert.ok(weights().size > 0 && [...weights()].every((f) => existsSync(join(dir, f)) && statSync(join(dir, f)).size > 10 << 20), "the stage's weights stay");
  });
});

/**
 * A stage's weights on a node whose rpc cache cannot take them whole (issue #53): the node holds no copy of the
 * model, so its stage's tensors come over the network and ggml-rpc-server saves each to its cache with an unchecked
 * write — on a full disk, one file is cut short. The node keeps as weights only the files the hub named for the
 * stage, whole (hashing to their names): the short one is removed, so the next cold load sends that tensor again
 * rather than reading a short file as a whole tensor. Both loads answer the single process's text.
 */
describe("a stage's load on a node whose rpc cache fills up", { timeout: 600_000 }, () => {
  const SMALL = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
  const GREEDY = { temperature: 0, top_k: 1, seed: 42, max_tokens: 40, cache_prompt: false };
  const PROMPT = 'The river ran past the old mill and';
  let hub: HubProcess;
  let node: NodeProcess;
  let unmount: (() => void) | null = null;
  let oracle = '';

  before(async () => {
    const direct = await startLlamaServer(llama(), { model: fixture('large'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      const r = (await (
        await fetch(`${direct.baseUrl}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: PROMPT, ...GREEDY }) })
      ).json()) as { choices: { text: string }[] };
      oracle = r.choices[0]!.text;
    } finally {
      await direct.child.terminate(5000);
    }
    const home = mkdtempSync(join(tmpdir(), 'relay-node-cellar-'));
    // 20 MiB: one of the stage's 12 MiB tensors fits, the next is cut short.
    unmount = mountSmallDisk(join(home, 'cache', 'llama', 'rpc'), 20);
    hub = await startHub({ env: SMALL, args: ['--cpu-budget-mb', '1000'] });
    node = await startNode(hub, { name: 'cellar', cpuBudgetMb: 1000, home, env: SMALL });
    await addModel(hub, { path: fixture('large'), name: 'large', required_vram_mb: 900 });
  });
  after(async () => {
    await node?.stop();
    await hub?.stop();
    unmount?.();
  });

  const complete = async (): Promise<string> => {
    const r = await hub.api<{ choices: { text: string }[] }>('/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'large', prompt: PROMPT, ...GREEDY }),
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.choices[0]!.text;
  };

  it('keeps the whole weights only; the next cold load answers the same text, never a short tensor', async () => {
    assert.equal(await complete(), oracle, 'the first load: the tensors came in full');
    const [sh] = (await hub.status()).shards;
    assert.ok(
      sh?.stages.some((st) => st.node === 'cellar'),
      'a shard with a stage on the node',
    );
    const dir = join(node.home, 'cache', 'llama', 'rpc');
    await until(
      async () => node.logs.some((l) => l.includes("recorded the weights a shard stage's load left")),
      (yes) => yes,
    );
    const index = readdirSync(dir).find((f) => f.startsWith('relay-index-'));
    assert.ok(index, 'the whole weights are indexed');
    const weights = (JSON.parse(readFileSync(join(dir, index), 'utf8')) as { files: { name: string; size: number }[] }).files;
    assert.ok(weights.length >= 1 && weights.length < 3, `${weights.length} of the stage's 3 tensors were saved whole`);
    for (const w of weights) assert.equal(statSync(join(dir, w.name)).size, w.size);
    assert.deepEqual(
      readdirSync(dir).filter((f) => /^[0-9a-f]{16}$/.test(f) && !weights.some((w) => w.name === f)),
      [],
      'no short file is left to be read as a tensor',
    );
    // A cold load again: the shard stops (Ollama's unload) and the next request starts it.
    const r = await hub.api<{ done_reason?: string }>('/api/generate', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'large', prompt: '', keep_alive: 0 }),
    });
    assert.equal(r.body.done_reason, 'unload');
    await until(
      async () => (await hub.status()).shards.length,
      (n) => n === 0,
    );
    assert.equal(await complete(), oracle, 'the second load: the whole weights from the cache, the rest sent again');
  });
});
