import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import type { ReplicaStatus } from '../../src/shared/status.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { streamUntil, GREEDY_EXTRA } from '../helpers/openai.js';
import { until, waitGone } from '../helpers/proc.js';

/**
 * The pool really pools, with a real hub and real nodes (separate processes, their own data dirs) on real
 * llama-server: several placements of one model, each answering like one llama-server at temperature 0;
 * failover of a request that has not received a byte; a bounded wait queue; the hub's own pause.
 * A llama-server stopped with SIGSTOP is how a test holds a request "in flight, no byte yet" for as long as
 * it needs, without timing: these hubs run with RELAY_HANG_CHECK=0, or the hub would (rightly) find the stopped
 * process at the first stall and fail it over (test/chaos/processes.test.ts tests that).
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_HANG_CHECK: '0' };
const PROMPT = 'The quick brown fox';
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

const placements = async (hub: HubProcess, model = 'm'): Promise<ReplicaStatus[]> => (await hub.status()).replicas.filter((r) => r.model === model);

async function streamText(c: OpenAI, prompt: string): Promise<string> {
  const s = await c.completions.create({ model: 'm', prompt, max_tokens: 24, stream: true, ...GREEDY_EXTRA });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text ?? '';
  return text;
}

/** A hub whose CPU budget holds one replica of m (694 MB) and not two, m registered, a client, and the oracle. */
async function hubWithModel(env: Record<string, string> = {}): Promise<{ hub: HubProcess; c: OpenAI; want: string }> {
  const hub = await startHub({ env: { ...ENV, ...env }, args: ['--cpu-budget-mb', '800'] });
  await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
  const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
  return { hub, c, want: (await directTexts(fixture('dense'), [PROMPT]))[0]! };
}

describe('several placements of one model', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let nodes: NodeProcess[] = [];
  let c: OpenAI;
  let want: string;
  before(async () => {
    ({ hub, c, want } = await hubWithModel());
    nodes = [await startNode(hub, { name: 'n1', cpuBudgetMb: 800, env: ENV }), await startNode(hub, { name: 'n2', cpuBudgetMb: 800, env: ENV })];
  });
  after(async () => {
    for (const n of nodes) await n.stop();
    await hub?.stop();
  });

  it('3 concurrent streaming clients on a 1-slot model → placements on the hub, n1 and n2; every text equals direct llama-server', async () => {
    const texts = await Promise.all([0, 1, 2].map(() => streamText(c, PROMPT)));
    assert.deepEqual(texts, [want, want, want]);
    // Three placements were started for the three waiting requests; the hub's may have answered all three
    // before the nodes' loads (a push, then a load) were done.
    const ps = await until(
      () => placements(hub),
      (xs) => xs.filter((p) => p.state === 'ready').length === 3,
      60_000,
    );
    assert.deepEqual(ps.map((p) => p.node ?? 'hub').sort(), ['hub', 'n1', 'n2']);
    // Every placement answers: concurrent requests go to the one with the most free slots.
    for (let i = 0; i < 10 && (await placements(hub)).some((p) => p.served === 0); i++) {
      const more = await Promise.all([0, 1, 2].map(() => c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA })));
      for (const r of more) assert.equal(r.choices[0]!.text, want);
    }
    const served = await placements(hub);
    assert.ok(
      served.every((p) => p.served > 0),
      `every placement answered: ${JSON.stringify(served.map((p) => [p.node, p.served]))}`,
    );
    assert.ok(
      served.every((p) => p.in_flight === 0),
      'in-flight counts are back to 0',
    );
    // The dashboard lists every placement of the model with its in-flight count.
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
    try {
      const page = await browser.newPage();
      await page.goto(hub.url);
      const rows = page.getByRole('table', { name: 'Replicas' }).getByRole('row').filter({ hasText: '0 of 1' });
      await rows.nth(2).waitFor();
      const texts = await rows.allInnerTexts();
      assert.equal(texts.length, 3);
      assert.deepEqual(texts.map((t) => /^(m)\s+(hub|node n\d)/.exec(t)?.[2]).sort(), ['hub', 'node n1', 'node n2']);
    } finally {
      await browser.close();
    }
  });

  it("pausing the hub's own devices (relay pause --hub) stops its placement; new requests go to the nodes", async () => {
    const onHub = (await placements(hub)).find((p) => p.node === null && p.state === 'ready')!;
    const out = await promisify(execFile)(process.execPath, [relayBin, 'pause', '--hub', '--hub-url', hub.url]);
    assert.match(out.stdout, /paused: the hub's devices are paused \(paused by the owner\)/);
    assert.ok(await waitGone(onHub.pid!, 30_000), "the hub's llama-server stopped");
    const st = await hub.status();
    assert.deepEqual([st.hub.availability, st.hub.paused], ['paused', true]);
    const texts = await Promise.all([0, 1].map(() => streamText(c, PROMPT)));
    assert.deepEqual(texts, [want, want]);
    assert.ok(
      (await placements(hub)).every((p) => p.node !== null),
      'no placement on the paused hub',
    );
    await promisify(execFile)(process.execPath, [relayBin, 'resume', '--hub', '--hub-url', hub.url]);
    const back = await hub.status();
    assert.notEqual(back.hub.availability, 'paused');
  });
});

describe('failover before the first byte', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  const nodes: NodeProcess[] = [];
  let c: OpenAI;
  let want: string;
  before(async () => {
    // A push capped at 10 MB/s makes a node's load last seconds: long enough to kill the node during it.
    ({ hub, c, want } = await hubWithModel({ RELAY_PUSH_MAX_MBPS: '10' }));
    const paused = await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
    assert.equal(paused.status, 200); // the hub's own device joins in only at the end
  });
  after(async () => {
    for (const n of nodes) await n.stop();
    await hub?.stop();
  });

  it('kill -9 of the node whose replica is loading: the client still gets the whole answer, from another node', async () => {
    nodes.push(await startNode(hub, { name: 'n1', cpuBudgetMb: 1200, env: ENV })); // more room: chosen first
    nodes.push(await startNode(hub, { name: 'n2', cpuBudgetMb: 800, env: ENV }));
    const req = c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    await until(
      () => placements(hub),
      (ps) => ps.some((p) => p.node === 'n1' && p.state === 'starting'),
      30_000,
    );
    await nodes[0]!.kill9();
    const r = await req;
    assert.equal(r.choices[0]!.text, want);
    assert.deepEqual(
      (await placements(hub)).filter((p) => p.state === 'ready').map((p) => p.node),
      ['n2'],
    );
  });

  it('kill -9 of the node while the request waits for its first byte: the answer comes from a fresh placement', async () => {
    nodes.push(await startNode(hub, { name: 'n3', cpuBudgetMb: 800, env: ENV }));
    const onN2 = (await placements(hub)).find((p) => p.node === 'n2' && p.state === 'ready')!;
    process.kill(onN2.pid!, 'SIGSTOP'); // n2's llama-server takes the request and sends nothing
    try {
      const req = c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
      await until(
        () => placements(hub),
        (ps) => ps.some((p) => p.id === onN2.id && p.in_flight === 1),
        30_000,
      );
      await nodes[1]!.kill9();
      const r = await req;
      assert.equal(r.choices[0]!.text, want);
      assert.deepEqual(
        (await placements(hub)).filter((p) => p.state === 'ready').map((p) => p.node),
        ['n3'],
      );
    } finally {
      // Its parent-death signal usually took it with the node; if not, a stopped process cannot notice.
      try {
        process.kill(onN2.pid!, 'SIGKILL');
      } catch {
        /* gone already */
      }
    }
  });

  it('kill -9 after the first byte: an SSE error event (never a retry); the next request is served', async () => {
    const stream = await c.completions.create({ model: 'm', prompt: 'Tell a very long tale', max_tokens: 400, stream: true, ...GREEDY_EXTRA });
    assert.equal(await streamUntil(stream, 3, () => nodes[2]!.kill9()), 'error');
    await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: false }) });
    const r = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want);
    assert.deepEqual(
      (await placements(hub)).filter((p) => p.state === 'ready').map((p) => p.node),
      [null],
    );
  });
});

describe('the wait queue', { timeout: 300_000 }, () => {
  it('a full queue answers 429 pool_busy with Retry-After; the waiting request and the hub carry on', async () => {
    const { hub } = await hubWithModel({ RELAY_QUEUE_MAX: '1', RELAY_MAX_PLACEMENTS_PER_MODEL: '1' });
    try {
      const body = JSON.stringify({ model: 'm', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA });
      const post = () => fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      assert.equal((await post()).status, 200);
      const p = (await placements(hub)).find((x) => x.state === 'ready')!;
      process.kill(p.pid!, 'SIGSTOP');
      let inFlight!: Promise<Response>;
      let queued!: Promise<Response>;
      try {
        inFlight = post();
        await until(
          () => placements(hub),
          (ps) => ps[0]?.in_flight === 1,
        );
        queued = post();
        await until(
          () => hub.status(),
          (s) => (s.queues[0]?.waiting ?? 0) === 1,
        );
        const full = await post();
        assert.equal(full.status, 429);
        assert.equal(full.headers.get('retry-after'), '5');
        const j = (await full.json()) as { error: { code: string; message: string } };
        assert.equal(j.error.code, 'pool_busy');
        assert.match(j.error.message, /RELAY_QUEUE_MAX=1/);
      } finally {
        process.kill(p.pid!, 'SIGCONT');
      }
      assert.deepEqual([(await inFlight).status, (await queued).status], [200, 200]);
      assert.equal((await post()).status, 200);
      assert.equal((await placements(hub))[0]!.served, 4);
    } finally {
      await hub.stop();
    }
  });
});
