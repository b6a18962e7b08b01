import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import OpenAI from 'openai';
import { freePort, startLlamaServer } from '../../src/main/core/llama/index.js';
import { sha256File } from '../fixtures/models.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { listeningSockets, startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { alive, waitGone, until } from '../helpers/proc.js';

/**
 * A household in one machine: a hub with no capacity of its own and nodes as separate `relay up` processes,
 * each with its own data dir and CPU budget, the real llama-server behind every replica.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

const nodesOf = async (h: HubProcess) => (await h.status()).nodes;
const replicasOf = async (h: HubProcess) => (await h.status()).replicas;

describe('nodes: tunnel, weight push, node replicas', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let a: NodeProcess;
  let client: OpenAI;

  before(async () => {
    hub = await startHub({ env: ENV });
    client = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    a = await startNode(hub, { name: 'kitchen', cpuBudgetMb: 1000, env: ENV });
    await addModel(hub, { path: fixture('dense'), name: 'dense' });
  });
  after(async () => {
    await a?.stop();
    await hub?.stop();
  });

  it('a node joins with a token and shows up with its devices', async () => {
    const ns = await until(
      () => nodesOf(hub),
      (x) => x.some((n) => n.name === 'kitchen' && n.connected),
    );
    const k = ns.find((n) => n.name === 'kitchen')!;
    assert.equal(k.state, 'idle');
    assert.deepEqual(
      k.devices.map((d) => d.id),
      ['CPU'],
    );
  });

  it("the hub pushes the GGUF (the node's copy hashes to the registered sha256) and serves it through the tunnel, same text as direct", async () => {
    const r = await client.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 24, ...GREEDY_EXTRA });
    const viaNode = r.choices[0]!.message.content;
    const reps = await replicasOf(hub);
    assert.deepEqual(
      reps.map((x) => [x.model, x.where, x.node, x.state]),
      [['dense', 'node', 'kitchen', 'ready']],
    );
    const registered = sha256File(fixture('dense'));
    const copy = join(a.home, 'cache', 'models', `${registered}.gguf`);
    assert.equal(sha256File(copy), registered);

    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      const d = new OpenAI({ baseURL: `${direct.baseUrl}/v1`, apiKey: 'x', maxRetries: 0 });
      const want = await d.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 24, ...GREEDY_EXTRA });
      assert.equal(viaNode, want.choices[0]!.message.content);
    } finally {
      await direct.child.terminate(5000);
    }
    // Streaming through the tunnel gives the same text.
    const stream = await client.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 24, stream: true, ...GREEDY_EXTRA });
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
    assert.equal(text, viaNode);
  });

  it("the node's llama-server listens on 127.0.0.1 only", async () => {
    const rep = (await replicasOf(hub))[0]!;
    const socks = listeningSockets(rep.pid!);
    assert.ok(socks.length >= 1, 'the replica listens');
    for (const s of socks) assert.equal(s.addr, '0100007F', `listening on ${s.addr}:${s.port}`);
  });

  it("pause during a streaming request: the client gets a clean error and the node's llama-server is gone within 30 s", async () => {
    const rep = (await replicasOf(hub)).find((x) => x.state === 'ready')!;
    const stream = await client.chat.completions.create(
      { model: 'dense', messages: [{ role: 'user', content: 'A long story please.' }], max_tokens: 4000, stream: true, ...GREEDY_EXTRA },
      { maxRetries: 0 },
    );
    // The error comes at once and names the pause: the hub ends the stream when it hears of the pause, and the node
    // closes the replica's requests before its SIGTERM (llama-server would hold them open until killed 10 s later).
    let got = 0;
    const ended = await (async () => {
      try {
        for await (const c of stream) {
          if (!c.choices[0]?.delta?.content || ++got !== 3) continue;
          const t0 = Date.now();
          await a.local('/pause', 'POST');
          console.log(`relay pause returned after ${Date.now() - t0} ms (the replica stopped, its card released)`);
        }
        return 'done';
      } catch (err) {
        return (err as Error).message;
      }
    })();
    assert.match(ended, /stopped mid-response \(stopped: node kitchen paused \(paused by the owner\)\)/);
    // The answer would move (moves.test.ts), but no other machine can hold the model: it ends, saying so.
    assert.match(ended, /could not continue elsewhere: .*kitchen paused/);
    assert.ok(await waitGone(rep.pid!, 30_000), 'llama-server released the card');
    const stopped = a.logs.find((l) => l.includes('"replica stopped"'));
    assert.ok(stopped, a.logs.slice(-20).join('\n'));
    assert.doesNotMatch(stopped, /SIGKILL/, 'llama-server exited on its SIGTERM, not killed after the grace period');
    const ns = await until(
      () => nodesOf(hub),
      (x) => x[0]?.state === 'paused',
    );
    assert.equal(ns[0]!.state, 'paused');
    const err = await client.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 503);
    assert.match((err.error as { message: string }).message, /kitchen paused \(paused by the owner\)/);
    await a.local('/resume', 'POST');
    await until(
      () => nodesOf(hub),
      (x) => x[0]?.state === 'idle',
    );
    const r = await client.completions.create({ model: 'dense', prompt: 'back', max_tokens: 4, ...GREEDY_EXTRA });
    assert.equal(r.usage?.completion_tokens, 4);
  });

  it('kill -9 of a node mid-stream: the client gets an error within 5 s, no hung request', async () => {
    const b = await startNode(hub, { name: 'attic', cpuBudgetMb: 1000, env: ENV });
    await a.local('/pause', 'POST'); // leave only attic for the next placement
    await until(
      () => nodesOf(hub),
      (x) => x.find((n) => n.name === 'kitchen')?.state === 'paused',
    );
    const stream = await client.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Go on and on.' }], max_tokens: 4000, stream: true, ...GREEDY_EXTRA });
    let got = 0;
    let killedAt = 0;
    const outcome = await Promise.race([
      (async () => {
        try {
          for await (const c of stream) {
            if (c.choices[0]?.delta?.content && ++got === 3) {
              killedAt = Date.now();
              b.proc.kill('SIGKILL');
            }
          }
          return 'completed';
        } catch {
          return 'error';
        }
      })(),
      new Promise<string>((r) => setTimeout(() => r('hung'), 60_000)),
    ]);
    assert.equal(outcome, 'error');
    assert.ok(Date.now() - killedAt < 5000, `the error took ${Date.now() - killedAt} ms`);
    await b.exited;
    await a.local('/resume', 'POST');
    await until(
      () => nodesOf(hub),
      (x) => x.find((n) => n.name === 'attic')?.state === 'offline' && x.find((n) => n.name === 'kitchen')?.state === 'idle',
    );
  });

  it('a revoked node is refused and cannot reconnect; others are unaffected', async () => {
    const c = await startNode(hub, { name: 'garage', cpuBudgetMb: 500, env: ENV });
    const r = await hub.api('/api/nodes/garage/revoke', { method: 'POST' });
    assert.equal(r.status, 200);
    const code = await c.exited; // the node's reconnect is refused: it stops for good
    assert.equal(code, 2);
    assert.ok(
      c.logs.some((l) => /revoked/.test(l)),
      c.logs.slice(-5).join('\n'),
    );
    const ns = await nodesOf(hub);
    assert.equal(ns.find((n) => n.name === 'garage')!.state, 'revoked');
    // A wrong credential is refused before any stream opens: 401 at the upgrade (over TLS, where nodes dial);
    // on plain HTTP the tunnel is refused whatever the credential (it would cross in clear).
    for (const [scheme, protocol, creds, status] of [
      ['wss', 'relay.v1', 'Bearer nope', 401],
      ['wss', 'relay.v0', 'Bearer nope', 401], // another relay version is refused by name at its hello, once authenticated
      ['wss', 'chat', 'Bearer nope', 426],
      ['ws', 'relay.v1', 'Bearer nope', 426],
    ] as const) {
      const ws = new WebSocket(`${hub.url.replace('http', scheme)}/tunnel`, [protocol], { headers: { 'x-relay-node': 'kitchen', authorization: creds }, rejectUnauthorized: false });
      ws.on('error', () => undefined);
      const [, res] = (await once(ws, 'unexpected-response')) as [unknown, { statusCode: number }];
      assert.equal(res.statusCode, status);
      ws.terminate();
    }
    const ok = await client.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA });
    assert.equal(ok.usage?.completion_tokens, 2);
  });
});

describe('weight push: resume and verification', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  before(async () => {
    // A bandwidth cap (a user-facing setting) makes the 137 MB push last a few seconds, long enough to cut.
    hub = await startHub({ env: { ...ENV, RELAY_PUSH_MAX_MBPS: '40' } });
    await addModel(hub, { path: fixture('large'), name: 'large' });
  });
  after(async () => {
    await hub?.stop();
  });

  async function cutMidPush(name: string): Promise<NodeProcess> {
    const n = await startNode(hub, { name, cpuBudgetMb: 1200, env: ENV });
    const req = fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'large', prompt: 'x', max_tokens: 2 }) });
    const s = await until(
      () => hub.status(),
      (x) => {
        const p = x.pushes[0];
        return p !== undefined && p.done > p.total * 0.3;
      },
    );
    assert.equal(s.pushes.length, 1, 'a push was in progress');
    await n.kill9();
    const res = await req;
    assert.ok(res.status >= 500, `the request failed cleanly (${res.status})`);
    await res.text();
    return n;
  }

  function partial(n: NodeProcess): { path: string; size: number } {
    const dir = join(n.home, 'cache', 'partial');
    const f = readdirSync(dir)[0]!;
    return { path: join(dir, f), size: statSync(join(dir, f)).size };
  }

  it('a push cut by a disconnect resumes from the partial file and ends verified', async () => {
    const n = await cutMidPush('den');
    const part = partial(n);
    const total = statSync(fixture('large')).size;
    assert.ok(part.size > 0 && part.size < total, `partial ${part.size} of ${total}`);
    const again = await startNode(hub, { name: 'den', home: n.home, token: null, cpuBudgetMb: 1200, env: ENV });
    try {
      const res = await fetch(`${hub.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'large', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const resumed = hub.logs.map((l) => JSON.parse(l) as { msg: string; node?: string; offset?: number }).find((l) => l.msg === 'resuming weight push' && l.node === 'den');
      assert.ok(resumed && resumed.offset! >= part.size - 1024 * 1024 && resumed.offset! <= total, `resumed at ${resumed?.offset}, partial was ${part.size}`);
      const sha = sha256File(fixture('large'));
      assert.equal(sha256File(join(n.home, 'cache', 'models', `${sha}.gguf`)), sha);
      assert.deepEqual(readdirSync(join(n.home, 'cache', 'partial')), []);
    } finally {
      await again.stop();
    }
  });

  it('flipped bytes in a partial push are rejected and the file is pushed again from zero', async () => {
    const n = await cutMidPush('loft');
    const part = partial(n);
    const buf = readFileSync(part.path);
    buf[Math.floor(buf.length / 2)]! ^= 0xff;
    writeFileSync(part.path, buf);
    const again = await startNode(hub, { name: 'loft', home: n.home, token: null, cpuBudgetMb: 1200, env: ENV });
    try {
      const res = await fetch(`${hub.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'large', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.ok(hub.logs.some((l) => l.includes('failed verification: pushing again from zero') && l.includes('"node":"loft"')));
      assert.ok(again.logs.some((l) => l.includes('hash_mismatch')));
      const sha = sha256File(fixture('large'));
      assert.equal(sha256File(join(n.home, 'cache', 'models', `${sha}.gguf`)), sha);
    } finally {
      await again.stop();
    }
  });
});

describe('reconnect reconciliation', { timeout: 300_000 }, () => {
  it('a node whose hub stays away releases its device after RELAY_NODE_ORPHAN_MS', async () => {
    const hub = await startHub({ env: ENV });
    const n = await startNode(hub, { name: 'shed', cpuBudgetMb: 1000, env: { ...ENV, RELAY_NODE_ORPHAN_MS: '1500' } });
    try {
      await addModel(hub, { path: fixture('dense'), name: 'dense' });
      const r = await fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'dense', prompt: 'x', max_tokens: 2 }) });
      assert.equal(r.status, 200);
      const pid = (await replicasOf(hub))[0]!.pid!;
      await hub.kill9();
      assert.ok(await waitGone(pid, 20_000), 'the orphaned replica was stopped');
      assert.ok(n.logs.some((l) => l.includes('unreachable for 1500 ms')));
    } finally {
      await n.stop();
    }
  });

  it('after a hub restart the node reports its replica, and the hub stops the one it no longer expects', async () => {
    const port = await freePort();
    const hub = await startHub({ env: ENV, args: ['--port', String(port)] });
    const n = await startNode(hub, { name: 'study', cpuBudgetMb: 1000, env: ENV });
    let hub2: HubProcess | null = null;
    try {
      await addModel(hub, { path: fixture('dense'), name: 'dense' });
      const r = await fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'dense', prompt: 'x', max_tokens: 2 }) });
      assert.equal(r.status, 200);
      const pid = (await replicasOf(hub))[0]!.pid!;
      assert.ok(alive(pid));
      await hub.kill9();
      hub2 = await startHub({ env: ENV, args: ['--port', String(port)], home: hub.home });
      // The node reconnects with backoff, says hello with its replica, and is told to stop it.
      assert.ok(await waitGone(pid, 30_000), 'the unexpected replica was stopped');
      const ns = await until(
        () => nodesOf(hub2!),
        (x) => x[0]?.connected === true,
      );
      assert.equal(ns[0]!.connected, true);
      assert.ok(hub2.logs.some((l) => l.includes('does not expect')));
    } finally {
      await n.stop();
      await hub2?.stop();
    }
  });
});
