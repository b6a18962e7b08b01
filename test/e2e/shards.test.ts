import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { assertExpertStages } from '../helpers/shards.js';
import { streamUntil, GREEDY_EXTRA } from '../helpers/openai.js';
import { until, waitGone } from '../helpers/proc.js';
import type { ShardStatus, V1ModelDto } from '../../src/shared/status.js';

/**
 * Shards with real processes: a hub and two nodes whose CPU budgets are each too small for the model (the
 * registered required_vram_mb makes the tiny fixtures "big"), so only a three-stage pipeline can place it.
 * The oracle: the shard's text at temperature 0 equals one llama-server process's text.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
// need 800 MB of weights → 1209 MB on one device; the hub (600) and each node (800) hold one part.
const BIG = 800;

async function shardsOf(h: HubProcess): Promise<readonly ShardStatus[]> {
  return (await h.status()).shards;
}

async function pool(hubEnv: Record<string, string> = {}): Promise<{ hub: HubProcess; nodes: NodeProcess[]; stop: () => Promise<void> }> {
  // Split by free memory: these tests pin the stages' layouts (the mechanics of each stage); what the planner
  // chooses from measured speed is shard-speed.test.ts's (here the first shard's timings would re-plan the MoE one).
  const hub = await startHub({ env: { ...ENV, RELAY_SHARD_PLAN: 'memory', ...hubEnv }, args: ['--cpu-budget-mb', '600'] });
  const nodes = [await startNode(hub, { name: 'north', cpuBudgetMb: 800, env: ENV }), await startNode(hub, { name: 'south', cpuBudgetMb: 800, env: ENV })];
  return {
    hub,
    nodes,
    stop: async () => {
      for (const n of nodes) await n.stop();
      await hub.stop();
    },
  };
}

const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];

/** A ready shard's rpc bytes or round trips per generated token: a 33-token generation less a 1-token one, over 32. */
async function perToken(hub: HubProcess, model: string, what: 'rpc_bytes' | 'rpc_round_trips' = 'rpc_bytes'): Promise<number> {
  const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const total = async () =>
    (await shardsOf(hub))
      .filter((x) => x.model === model && x.state === 'ready')
      .flatMap((x) => x.stages)
      .reduce((a, st) => a + (st[what] ?? 0), 0);
  await c.completions.create({ model, prompt: 'Count with me', max_tokens: 1, ...GREEDY_EXTRA });
  const b0 = await total();
  await c.completions.create({ model, prompt: 'Count with me', max_tokens: 33, ...GREEDY_EXTRA, ignore_eos: true } as never);
  return ((await total()) - b0) / 32;
}

describe('shards', { timeout: 600_000 }, () => {
  let p: Awaited<ReturnType<typeof pool>>;
  let client: OpenAI;
  before(async () => {
    p = await pool();
    client = new OpenAI({ baseURL: `${p.hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await addModel(p.hub, { path: fixture('dense'), name: 'dense', required_vram_mb: BIG });
    // Three quarters experts: 440 MB need 838 MB on one device (over every budget); the hub keeps attention and
    // KV of every layer plus one layer's experts (584 MB of its 600), the nodes the other layers' experts.
    await addModel(p.hub, { path: fixture('moewide'), name: 'moe', required_vram_mb: 440 });
  });
  after(async () => {
    await p?.stop();
  });

  it('a dense model no single device fits runs as a 3-stage shard with the same text as one process; /status shows the stages, /metrics counts it', async () => {
    const want = await directTexts(fixture('dense'), PROMPTS);
    const got: string[] = [];
    for (const pr of PROMPTS) got.push((await client.completions.create({ model: 'dense', prompt: pr, max_tokens: 24, ...GREEDY_EXTRA })).choices[0]!.text);
    assert.deepEqual(got, want);
    const [sh] = await shardsOf(p.hub);
    assert.equal(sh!.state, 'ready');
    assert.match(await (await fetch(`${p.hub.url}/metrics`)).text(), /relay_shards\{state="ready"\} 1\n/, '/metrics counts the shard');
    assert.deepEqual(
      sh!.stages.map((st) => [st.node, st.layers, st.output]),
      [
        [null, [0, 1], true],
        ['north', [1, 3], false],
        ['south', [3, 4], false],
      ],
    );
    for (const st of sh!.stages) {
      assert.ok(st.need_mb > 0);
      if (st.node) assert.match(st.rpc_endpoint!, /^127\.0\.0\.1:\d+$/);
    }
    // Each node knows which stage it serves (its local /status, the tray's status line).
    assert.deepEqual((await p.nodes[0]!.local('/status')).stages, [{ model: 'dense', index: 1, of: 3, layers: [1, 3] }]);
    assert.deepEqual((await p.nodes[1]!.local('/status')).stages, [{ model: 'dense', index: 2, of: 3, layers: [3, 4] }]);
    // The output layer (and so sampling) runs on the hub: llama-server put output.weight in the CPU buffer.
    assert.ok(
      sh!.buffers.some((b) => /RPC0\[127\.0\.0\.1:\d+\] model buffer size/.test(b)),
      sh!.buffers.join('\n'),
    );
    const models = await client.models.list();
    assert.equal((models.data.find((m) => m.id === 'dense') as V1ModelDto).available, true);
    // One wait on each remote stage per token: the hidden state in, the stage's output back. (A pattern that also
    // pinned each layer's attn_output.weight to the hub made it one more per remote layer: 5 here.)
    const trips = await perToken(p.hub, 'dense', 'rpc_round_trips');
    assert.ok(Math.abs(trips - 2) <= 0.25, `rpc round trips per generated token: ${trips}`);
  });

  it("a MoE model: experts of each remote stage on that stage's device, the rest on the hub; same text as one process", async () => {
    const want = await directTexts(fixture('moewide'), PROMPTS);
    const got: string[] = [];
    for (const pr of PROMPTS) got.push((await client.completions.create({ model: 'moe', prompt: pr, max_tokens: 24, ...GREEDY_EXTRA })).choices[0]!.text);
    assert.deepEqual(got, want);
    const sh = (await shardsOf(p.hub)).find((x) => x.model === 'moe')!;
    assert.equal(sh.state, 'ready');
    assertExpertStages(sh);
    assert.deepEqual(
      sh.stages.map((st) => [st.node, st.layers, st.need_mb]),
      [
        [null, [0, 1], 584],
        ['north', [1, 3], 554],
        ['south', [3, 4], 469],
      ],
    );
  });

  it('a member that pauses tears the shard down: head gone, other rpc-servers stopped, 503 names the paused node', async () => {
    await client.completions.create({ model: 'dense', prompt: 'warm', max_tokens: 2, ...GREEDY_EXTRA }); // the MoE shard made way
    const sh = (await shardsOf(p.hub)).find((x) => x.model === 'dense' && x.state === 'ready')!;
    const stream = await client.completions.create({ model: 'dense', prompt: 'Tell a very long tale', max_tokens: 400, stream: true, ...GREEDY_EXTRA });
    assert.equal(await streamUntil(stream, 3, () => p.nodes[1]!.local('/pause', 'POST')), 'error');
    assert.ok(await waitGone(sh.pid!, 30_000), 'the shard head stopped');
    const err = await client.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 503, String(err));
    const msg = (err.error as { message: string }).message;
    assert.match(msg, /south paused \(paused by the owner\)/);
    assert.match(msg, /needs 1209 MB/);
    const north = await p.nodes[0]!.local('/status');
    assert.equal(north.availability, 'idle'); // its rpc-server was stopped: no streams left
    await p.nodes[1]!.local('/resume', 'POST');
    await until(
      () => p.hub.status(),
      (s) => s.nodes.every((x) => x.state === 'idle'),
    );
  });

  it('a head that aborts (an rpc-server killed mid-generation) gives the client an error; the next request re-plans', async () => {
    await client.completions.create({ model: 'dense', prompt: 'warm', max_tokens: 2, ...GREEDY_EXTRA });
    const sh = (await shardsOf(p.hub)).find((x) => x.model === 'dense' && x.state === 'ready')!;
    const stream = await client.completions.create({ model: 'dense', prompt: 'Tell a very long tale', max_tokens: 400, stream: true, ...GREEDY_EXTRA });
    // Kill the ggml-rpc-server serving the north stage (a child of the north node process) mid-generation.
    const outcome = await streamUntil(stream, 3, async () => {
      const { execSync } = await import('node:child_process');
      execSync(`pkill -9 -f "ggml-rpc-server.*--port" -P ${p.nodes[0]!.proc.pid}`, { stdio: 'ignore' });
    });
    assert.equal(outcome, 'error');
    const failed = await until(
      () => shardsOf(p.hub),
      (xs) => xs.some((x) => x.id === sh.id && x.state === 'failed'),
    );
    assert.ok(failed.some((x) => x.id === sh.id && x.state === 'failed'));
    const again = await client.completions.create({ model: 'dense', prompt: PROMPTS[0]!, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(again.choices[0]!.text, (await directTexts(fixture('dense'), [PROMPTS[0]!]))[0]);
    const now = (await shardsOf(p.hub)).find((x) => x.model === 'dense' && x.state === 'ready')!;
    assert.notEqual(now.id, sh.id);
  });
});

describe('hub-last: bytes per generated token', { timeout: 600_000 }, () => {
  async function measure(hubEnv: Record<string, string>): Promise<{ small: number; wide: number }> {
    const p = await pool(hubEnv);
    try {
      await addModel(p.hub, { path: fixture('dense'), name: 'small', required_vram_mb: BIG });
      // 330 MB: its 128,256-token logits take 250 MB at the output (the hub's stage), 122 MB beyond what the fixed
      // overhead holds, so the hub's 600 MB take one layer of it as they take one of the 800 MB model's.
      await addModel(p.hub, { path: fixture('widevocab'), name: 'wide', required_vram_mb: 330 });
      const small = await perToken(p.hub, 'small');
      await p.hub.api('/api/models/small', { method: 'DELETE' });
      const wide = await perToken(p.hub, 'wide');
      return { small, wide };
    } finally {
      await p.stop();
    }
  }

  it('with the output on the hub, per-token tunnel bytes do not grow with the vocabulary; with it remote (the experiment) they do', async () => {
    const hubLast = await measure({});
    const logitsDelta = (128256 - 32000) * 4; // the wider vocabulary's extra f32 logits per token
    // Same hidden size, 4× the vocabulary: the bytes that cross per token stay the same (within 10%).
    assert.ok(hubLast.wide <= hubLast.small * 1.1 + 1024, `hub last: ${hubLast.small} → ${hubLast.wide} bytes/token`);
    const remote = await measure({ RELAY_EXPERIMENT_OUTPUT_REMOTE: '1' });
    assert.ok(remote.wide - remote.small >= 0.8 * logitsDelta, `output remote: ${remote.small} → ${remote.wide} bytes/token`);
    console.log(`bytes/token: hub last ${hubLast.small.toFixed(0)} (32k vocab) / ${hubLast.wide.toFixed(0)} (128k); output remote ${remote.small.toFixed(0)} / ${remote.wide.toFixed(0)}`);
  });
});
