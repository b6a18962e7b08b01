import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { until, waitGone } from '../helpers/proc.js';
import { assertCacheIntact, assertNoStrays, assertStoreIntact, linkProxy, type LinkProxy } from '../helpers/chaos.js';
import { slowDisk, type SlowDisk } from '../helpers/slowfs.js';

/**
 * The processes a request depends on, broken while it runs: a node replica's llama-server, a shard stage's
 * ggml-rpc-server, stopped (SIGSTOP: hung) or killed, before the first byte and mid-stream; a node stopped or
 * killed while it fills a stage's rpc cache. The hub finds a stopped process when a request through it goes
 * quiet (the node answers pings, so it asks the node about the process), fails the placement and kills it; the
 * request goes elsewhere or ends with its error event, the next is served, and nothing is left running that
 * the hub does not list. Also: the shard's rpc bridge refuses a local connection that is not its head's.
 */
const ENV = { RELAY_CONTEXT_SIZE: '2048', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';
const sha256 = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

async function streamOutcome(c: OpenAI, model: string, onThird: () => void): Promise<'done' | 'error'> {
  const stream = await c.completions.create({ model, prompt: 'Once upon a time', max_tokens: 1800, stream: true, ...GREEDY_EXTRA });
  let chunks = 0;
  try {
    for await (const ch of stream) if ((ch.choices[0]?.text ?? '') !== '' && ++chunks === 3) onThird();
    return 'done';
  } catch {
    return 'error';
  }
}

describe("a node replica's llama-server, stopped or killed", { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let n1: NodeProcess;
  let n2: NodeProcess;
  let c: OpenAI;
  let want: string;
  const paused = (name: string, yes: boolean) =>
    until(
      async () => (await hub.status()).nodes.find((n) => n.name === name)?.state,
      (x) => (yes ? x === 'paused' : x === 'idle'),
    );
  /** A ready replica of `model` on n1 (n2 paused meanwhile, so n1 serves it); its pid. */
  const onN1 = async (model: string): Promise<number> => {
    await n2.local('/pause', 'POST');
    await paused('n2', true);
    await c.completions.create({ model, prompt: PROMPT, max_tokens: 4, ...GREEDY_EXTRA });
    await n2.local('/resume', 'POST');
    await paused('n2', false);
    const r = (await hub.status()).replicas.find((x) => x.model === model && x.node === 'n1' && x.state === 'ready');
    assert.ok(r?.pid, 'n1 runs a ready replica');
    return r.pid;
  };
  /** The pid of the placement of `model` serving a request right now. */
  const serving = async (model: string): Promise<number> => (await hub.status()).replicas.find((x) => x.model === model && x.in_flight === 1)!.pid!;
  const settled = async (model: string): Promise<void> => {
    const r = await c.completions.create({ model, prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want, 'the next request is served');
    await assertNoStrays(hub, [n1, n2]);
    await assertStoreIntact(hub, [model]);
    assertCacheIntact(n1);
    assertCacheIntact(n2);
  };

  before(async () => {
    hub = await startHub({ env: ENV });
    // One model per test (copies of one file): a machine backed off for one test's model is not for the next's.
    for (const name of ['a', 'b', 'c', 'd']) await addModel(hub, { path: fixture('dense'), name, required_vram_mb: 300 });
    n1 = await startNode(hub, { name: 'n1', cpuBudgetMb: 4000, env: ENV });
    n2 = await startNode(hub, { name: 'n2', cpuBudgetMb: 1600, env: ENV });
    c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    want = (await directTexts(fixture('dense'), [PROMPT], 24))[0]!;
  });
  after(async () => {
    await n1?.stop();
    await n2?.stop();
    await hub?.stop();
  });

  it('SIGSTOP before the first byte: the hub finds it stopped, kills it, and the request is answered by n2', async () => {
    const pid = await onN1('a');
    process.kill(pid, 'SIGSTOP'); // hung: the node's agent still answers pings
    const r = await c.completions.create({ model: 'a', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want);
    assert.ok(await waitGone(pid, 30_000), 'the stopped llama-server was killed');
    const b = (await hub.status()).backoffs.find((x) => x.node === 'n1' && x.model === 'a');
    assert.match(b?.reason ?? '', /hung: its llama-server is stopped/, 'a hung replica counts against its node');
    await settled('a');
  });

  it('SIGSTOP mid-stream: the stream ends with its error event; the process is killed', async () => {
    await onN1('b');
    let pid = 0;
    assert.equal(
      await streamOutcome(c, 'b', () => {
        void serving('b').then((p) => {
          pid = p;
          process.kill(p, 'SIGSTOP');
        });
      }),
      'error',
    );
    assert.ok(pid > 0 && (await waitGone(pid, 30_000)));
    await settled('b');
  });

  it('SIGKILL before the first byte: another placement answers', async () => {
    const pid = await onN1('c');
    process.kill(pid, 'SIGKILL');
    const r = await c.completions.create({ model: 'c', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want);
    await settled('c');
  });

  it('SIGKILL mid-stream: an error event at once; the next request is served', async () => {
    await onN1('d');
    assert.equal(
      await streamOutcome(c, 'd', () => {
        void serving('d').then((p) => process.kill(p, 'SIGKILL'));
      }),
      'error',
    );
    await settled('d');
  });
});

describe("a shard stage's rpc-server, stopped or killed; a node stopped or killed mid-fill; the bridge", { timeout: 600_000 }, () => {
  let disk: SlowDisk;
  let hub: HubProcess;
  let north: NodeProcess;
  let south: NodeProcess;
  let c: OpenAI;
  let want: string;
  let northHome: string;
  let proxy: LinkProxy;
  const startNorth = async (token?: null): Promise<void> => {
    // north reaches the hub through a link proxy (its Wi-Fi, which the mid-fill case cuts).
    north = await startNode({ url: proxy.url, home: hub.home }, { name: 'north', cpuBudgetMb: 1000, env: ENV, home: northHome, ...(token === null ? { token: null } : {}) });
  };
  before(async () => {
    // north holds "big"'s file on a slow disk: filling its stage's rpc cache from it takes seconds.
    disk = await slowDisk(dirname(fixture('large')), 12 * 1024 * 1024);
    // 800 (dense) and 1100 MB (big) of weights: over every single device of 1000 MB, two stages hold them.
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    await addModel(hub, { path: fixture('dense'), name: 'dense', required_vram_mb: 800 });
    await addModel(hub, { path: fixture('large'), name: 'big', required_vram_mb: 1100 });
    proxy = await linkProxy(hub.url);
    northHome = mkdtempSync(join(tmpdir(), 'relay-node-north-'));
    mkdirSync(join(northHome, 'cache', 'models'), { recursive: true });
    symlinkSync(join(disk.dir, basename(fixture('large'))), join(northHome, 'cache', 'models', `${sha256(fixture('large'))}.gguf`));
    await startNorth();
    south = await startNode(hub, { name: 'south', cpuBudgetMb: 1000, env: ENV });
    c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    want = (await directTexts(fixture('dense'), [PROMPT], 24))[0]!;
  });
  after(async () => {
    await proxy?.close();
    await north?.stop();
    await south?.stop();
    await hub?.stop();
    await disk?.close();
  });

  const shardServes = async (): Promise<void> => {
    const r = await c.completions.create({ model: 'dense', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want, "the shard's text equals one process's");
  };
  /** The pid of the dense shard's remote stage's rpc-server (its node's report). */
  const rpcPid = async (): Promise<number> => {
    const st = await hub.status();
    const member = st.shards.find((x) => x.model === 'dense' && x.state === 'ready')!.stages.find((x) => x.node !== null)!.node!;
    const n = st.nodes.find((x) => x.name === member)!;
    assert.equal(n.rpcs.length, 1, `${member} runs one rpc-server`);
    return n.rpcs[0]!.pid!;
  };

  it("the rpc bridge refuses a local connection that is not the shard head's; the shard keeps answering", async () => {
    await shardServes();
    const sh = (await hub.status()).shards.find((s) => s.model === 'dense' && s.state === 'ready')!;
    const endpoint = sh.stages.find((st) => st.node !== null)!.rpc_endpoint!;
    const [host, port] = endpoint.split(':');
    // Another local user's process (this test) talks ggml-rpc to the bridge: closed before a byte reaches the node.
    const got = await new Promise<{ closed: boolean; data: number }>((resolve) => {
      const s = connect({ host, port: Number(port) });
      let data = 0;
      s.on('data', (d: Buffer) => (data += d.byteLength));
      s.on('error', () => undefined);
      s.on('connect', () => s.write(Buffer.alloc(64, 1)));
      s.on('close', () => resolve({ closed: true, data }));
      setTimeout(() => resolve({ closed: false, data }), 5000);
    });
    assert.deepEqual(got, { closed: true, data: 0 });
    assert.ok(hub.logs.some((l) => l.includes('that is not its head') && l.includes('refused')));
    await shardServes();
  });

  it("SIGSTOP of a stage's rpc-server mid-stream: the hub finds it stopped, the stream ends with an error event, the next request gets a new shard", async () => {
    const pid = await rpcPid();
    assert.equal(await streamOutcome(c, 'dense', () => process.kill(pid, 'SIGSTOP')), 'error');
    assert.ok(await waitGone(pid, 30_000), 'the stopped rpc-server was stopped for good');
    await shardServes();
    await assertNoStrays(hub, [north, south]);
  });

  it("SIGKILL of a stage's rpc-server mid-stream: the head fails, an error event; the next request gets a new shard", async () => {
    const pid = await rpcPid();
    assert.equal(await streamOutcome(c, 'dense', () => process.kill(pid, 'SIGKILL')), 'error');
    await shardServes();
    await assertNoStrays(hub, [north, south]);
  });

  for (const signal of ['SIGSTOP', 'SIGKILL', 'a dead link'] as const) {
    const fault = signal === 'a dead link' ? "north's link dead" : `${signal} of north`;
    it(`${fault} mid-fill (its stage's rpc cache, from its copy on a slow disk): a clean error in seconds; nothing left behind`, async () => {
      await south.local('/pause', 'POST'); // the shard of big is the hub and north, which fills its stage first
      await until(
        async () => (await hub.status()).nodes.find((n) => n.name === 'south')?.state,
        (x) => x === 'paused',
      );
      hub.logs.length = 0;
      const req = fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'big', prompt: PROMPT, max_tokens: 4 }) });
      const started = await until(
        () => hub.logs.some((l) => l.includes('starting shard') && l.includes('"model":"big"')),
        (x) => x,
        30_000,
      );
      assert.ok(started, hub.logs.join('\n'));
      await new Promise((r) => setTimeout(r, 1000)); // well into the fill (the slow disk gives it several seconds)
      assert.ok(!hub.logs.some((l) => l.includes('rpc cache filled')), 'still filling');
      const at = Date.now();
      if (signal === 'a dead link') proxy.blackhole();
      else north.proc.kill(signal);
      const res = await req;
      console.log(`# ${fault} mid-fill: answered ${res.status} ${((Date.now() - at) / 1000).toFixed(1)} s after the fault`);
      assert.ok(res.status === 503 || res.status === 502, String(res.status));
      const j = (await res.json()) as { error: { code: string } };
      assert.ok(['model_unavailable', 'pool_busy', 'node_lost'].includes(j.error.code), j.error.code);
      if (signal === 'SIGSTOP') north.proc.kill('SIGCONT');
      else if (signal === 'a dead link') proxy.heal();
      else await startNorth(null);
      await until(
        async () => (await hub.status()).nodes.find((n) => n.name === 'north')?.connected,
        (x) => x === true,
        60_000,
      );
      assert.ok(!(await hub.status()).backoffs.some((b) => b.node === 'north'), 'a node that went away is not backed off');
      await south.local('/resume', 'POST');
      await assertNoStrays(hub, [north, south]);
      await assertStoreIntact(hub, ['dense', 'big']);
      assertCacheIntact(south);
    });
  }
});
