import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { shapedLink, type ShapedLink } from '../helpers/shaped-link.js';
import { planShard, shardModel, type ShardDevice } from '../../src/main/core/scheduler/decide/shard.js';
import { describe as describeModel } from '../../src/main/core/models/describe.js';
import type { ShardStatus, StatusDto } from '../../src/shared/status.js';

/**
 * Shards planned from measured speed, with real processes: a hub (600 MB CPU budget) and two nodes, `near` (800 MB)
 * on a direct link and `far` (1000 MB: the most room) behind a user-space link with a 20 ms one-way delay. The
 * `deep` fixture (12 layers: the same function as `dense`, so the oracle is one llama-server's text) is registered
 * big enough that no single machine holds it.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];
const SETTINGS = { contextSize: 512, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' as const };

describe('shards planned by measured speed', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let link: ShapedLink;
  const nodes: NodeProcess[] = [];
  let client: OpenAI;
  let want: string[];

  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '600'] });
    nodes.push(await startNode(hub, { name: 'near', cpuBudgetMb: 800, env: ENV }));
    link = await shapedLink(hub.url, { mbitPerSec: 200, delayMs: 20, queueBytes: 256 * 1024 });
    nodes.push(await startNode({ url: link.url, home: hub.home }, { name: 'far', cpuBudgetMb: 1000, env: ENV }));
    client = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    want = await directTexts(fixture('deep'), PROMPTS);
  });
  after(async () => {
    for (const n of nodes) await n.stop();
    await link?.close();
    await hub?.stop();
  });

  const shardOf = async (model: string): Promise<ShardStatus> =>
    (
      await until(
        () => hub.status(),
        (s) => s.shards.some((x) => x.model === model && x.state === 'ready'),
      )
    ).shards.find((x) => x.model === model && x.state === 'ready')!;
  const texts = async (model: string): Promise<string[]> => {
    const out: string[] = [];
    for (const pr of PROMPTS) out.push((await client.completions.create({ model, prompt: pr, max_tokens: 24, ...GREEDY_EXTRA })).choices[0]!.text);
    return out;
  };

  it("each node's link is measured from the start: the delayed one shows its round trip in /status and the picture", async () => {
    const s = await until(
      () => hub.status(),
      (x) => x.nodes.length === 2 && x.nodes.every((n) => n.link?.rtt_ms != null),
    );
    const rtt = (name: string) => s.nodes.find((n) => n.name === name)!.link!.rtt_ms!;
    assert.ok(rtt('far') >= 40, `far: ${rtt('far')} ms`);
    assert.ok(rtt('near') < 20, `near: ${rtt('near')} ms`);
    assert.equal(s.machines.find((m) => m.name === 'far')!.link!.rtt_ms, rtt('far'));
    // Nothing measured yet: every device is at its kind's default.
    for (const d of [...s.devices, ...s.nodes.flatMap((n) => n.devices)]) assert.equal(d.speed?.source, 'default');
  });

  it('a member whose link only slows the shard is left out when the model fits without it; the text equals one process', async () => {
    // 600 MB: the hub plus either node holds it. By free memory alone `far` (the most room) would be its partner.
    await addModel(hub, { path: fixture('deep'), name: 'pair', required_vram_mb: 600 });
    const byMemory = planShard(devicesOf(await hub.status()), (await modelOf(600))!, SETTINGS, { by: 'memory' });
    assert.deepEqual(byMemory.kind === 'shard' && byMemory.stages.map((st) => st.node), [null, 'far'], 'the memory planner would take far');
    assert.deepEqual(await texts('pair'), want);
    const sh = await shardOf('pair');
    assert.deepEqual(
      sh.stages.map((st) => st.node),
      [null, 'near'],
    );
    const s = await hub.status();
    // Predicted and measured side by side; each stage measured on its own.
    assert.ok(sh.predicted_ms_per_token! > 0);
    assert.ok(sh.ms_per_token! > 0);
    for (const st of sh.stages) assert.ok(st.predicted_ms! > 0 && st.measured_ms! > 0, JSON.stringify(st));
    const hubCpu = s.devices.find((d) => d.id === 'CPU')!;
    assert.equal(hubCpu.speed!.source, 'measured');
    assert.ok(hubCpu.speed!.per_layer_ms.pair! > 0);
    assert.equal(s.nodes.find((n) => n.name === 'near')!.devices[0]!.speed!.source, 'measured');
    await unload('pair');
  });

  it('a shard measured off its prediction offers a re-plan, and its next cold start takes it; the text still equals one process', async () => {
    // 800 MB: only all three hold it. `far` has never run a layer: its default is slower than what the others measured.
    await addModel(hub, { path: fixture('deep'), name: 'trio', required_vram_mb: 800 });
    assert.deepEqual(await texts('trio'), want);
    const first = await shardOf('trio');
    assert.equal(first.stages.length, 3);
    const offered = (
      await until(
        () => shardOf('trio'),
        (x) => x.replan !== null,
      )
    ).replan!;
    assert.match(offered.reason, /measured .* ms\/token, predicted .* its next cold start takes this plan/);
    assert.notDeepEqual(
      offered.stages.map((st) => st.layers),
      first.stages.map((st) => st.layers),
    );
    const show = (st: readonly { node: string | null; layers: readonly [number, number] }[]) => st.map((x) => `${x.node ?? 'hub'}[${x.layers.join(',')})`).join(' ');
    console.log(`trio: ${show(first.stages)} → ${show(offered.stages)} (${offered.reason}; the new plan predicts ${offered.predicted_ms_per_token} ms/token)`);
    await unload('trio');
    assert.deepEqual(await texts('trio'), want);
    const next = await shardOf('trio');
    assert.deepEqual(
      next.stages.map((st) => [st.node, st.layers]),
      offered.stages.map((st) => [st.node, st.layers]),
    );
  });

  /** The Ollama way to unload a model now (keep_alive 0): its shard stops and the next request starts it cold. */
  async function unload(model: string): Promise<void> {
    const r = await fetch(`${hub.url}/api/generate`, { method: 'POST', body: JSON.stringify({ model, keep_alive: 0 }) });
    assert.equal(r.status, 200, await r.text());
    await until(
      () => hub.status(),
      (s) => !s.shards.some((x) => x.model === model && x.state !== 'failed'),
    );
  }

  async function modelOf(requiredMb: number) {
    const rec = await describeModel(fixture('deep'));
    return shardModel({ ...rec, name: 'x', required_vram_mb: requiredMb, embedding: false, added_at: '' });
  }

  /** The pool as /status shows it, as the planner's devices (no speeds: the memory planner's view). */
  function devicesOf(s: StatusDto): ShardDevice[] {
    return [
      ...s.devices.map((d) => ({ node: null, device: d.id, kind: d.kind, freeMb: d.free_mb, totalMb: d.total_mb })),
      ...s.nodes.flatMap((n) => n.devices.map((d) => ({ node: n.name, device: d.id, kind: d.kind, freeMb: d.free_mb, totalMb: d.total_mb }))),
    ];
  }
});
