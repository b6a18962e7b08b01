import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hubConfigFromEnv } from '../../src/main/core/config.js';
import { startHub, type Hub } from '../../src/main/core/hub/index.js';
import { openRpcBridge } from '../../src/main/core/pool/rpc-bridge.js';
import { hubJoinToken } from '../../src/main/core/pairing/tokens.js';
import { readGgufFile } from '../../src/main/core/gguf/index.js';
import { startLlamaServer } from '../../src/main/core/llama/index.js';
import { createLogger } from '../../src/main/core/log.js';
import { NodeAgent } from '../../src/main/core/node/agent.js';
import { joinHub } from '../../src/main/core/node/link/hub-client.js';
import { fixture, llama } from '../helpers/llama.js';
import { listeningSockets } from '../helpers/node.js';
import { complete } from '../helpers/openai.js';
import { rawNode as rawNodeOf } from '../helpers/raw-node.js';
import { packageVersion } from '../../src/main/core/app-files.js';
import { PROTOCOL_VERSION } from '../../src/shared/protocol.js';
import type { StatusDto } from '../../src/shared/status.js';
import { bandwidthMsPerGib, DEFAULT_MS_PER_GIB } from '../../src/main/core/scheduler/decide/speed.js';

const log = createLogger({ level: 'warn', pretty: false });
let hub: Hub;
let home: string;

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'relay-hub-'));
  hub = await startHub(hubConfigFromEnv({ HOME: tmpdir() }, { port: 0, home }), { log, install: llama() });
});
after(async () => {
  await hub?.close();
});

const rawNode = (name: string, joined?: Parameters<typeof rawNodeOf>[2], subprotocol?: string) => rawNodeOf({ url: hub.url, home }, name, joined, subprotocol);

describe('control protocol', { timeout: 120_000 }, () => {
  it('answers malformed and unknown messages with an error and keeps the node connected', async () => {
    const n = await rawNode('prober');
    n.send(n.hello);
    assert.equal((await n.next()).type, 'welcome');
    for (const [bad, code] of [
      ['{not json', 'bad_json'],
      ['{"type":"format-disk"}', 'unknown_type'],
      ['{"type":"heartbeat","devices":"many"}', 'bad_message'],
      ['42', 'bad_message'],
    ] as const) {
      n.send(bad);
      const reply = await n.next();
      assert.deepEqual([reply.type, reply.code], ['error', code], JSON.stringify(reply));
    }
    n.send({ type: 'heartbeat', devices: [], availability: 'busy', reason: null, replicas: [], cache: [] });
    for (let i = 0; i < 100 && hub.nodes.get('prober')?.availability !== 'busy'; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(hub.nodes.get('prober')?.availability, 'busy');
    assert.equal(n.session.closed, false);
    n.session.close();
  });

  it("a node's GPU with its memory's bandwidth: /status predicts its speed from it until measured; a bad bandwidth is refused", async () => {
    const n = await rawNode('bandwidth');
    const gpu = { id: 'CUDA0', kind: 'gpu', description: 'NVIDIA GeForce RTX 4070 SUPER', totalMb: 12282, freeMb: 11000, memGBps: 504.048 };
    n.send({ ...n.hello, devices: [gpu, { ...gpu, id: 'Vulkan0', description: 'llvmpipe', memGBps: undefined }] });
    assert.equal((await n.next()).type, 'welcome');
    const s = (await (await fetch(`${hub.url}/status`)).json()) as StatusDto;
    const devices = s.nodes.find((x) => x.name === 'bandwidth')!.devices;
    assert.deepEqual(
      devices.map((d) => [d.id, d.speed?.source, d.speed?.mem_gbps, d.speed?.ms_per_gib]),
      [
        ['CUDA0', 'bandwidth', 504, Math.round(bandwidthMsPerGib(504.048) * 1000) / 1000],
        ['Vulkan0', 'default', undefined, DEFAULT_MS_PER_GIB.gpu],
      ],
    );
    n.send({ type: 'heartbeat', devices: [{ ...gpu, memGBps: -1 }], availability: 'idle', reason: null, replicas: [], cache: [] });
    const reply = await n.next();
    assert.deepEqual([reply.type, reply.code], ['error', 'bad_message'], JSON.stringify(reply));
    assert.equal(hub.nodes.get('bandwidth')?.devices[0]?.memGBps, 504.048, 'the last good report stands');
    n.session.close();
  });

  it('refuses an older node whose llama.cpp build differs: "update this node", both versions named, kept in /status until it comes back updated', async () => {
    const n = await rawNode('oldbuild');
    // relay 0.1.0's hello: no relay field; its llama.cpp build is another one.
    n.send({ ...n.hello, llama: 'version: 1 (commit 0000000)' });
    const reply = await n.next();
    assert.equal(reply.code, 'version_mismatch');
    assert.match(String(reply.message), new RegExp(`^update this node to relay ${packageVersion()}: the node runs relay 0\\.1\\.0 or older, the hub relay ${packageVersion()}`));
    assert.match(String(reply.message), new RegExp(`hub "${llama().version.replace(/[()]/g, '\\$&')}", node "version: 1 \\(commit 0000000\\)"`));
    if (!n.session.closed) await once(n.session, 'close'); // the hub hangs up after saying why
    const seen = hub.nodes.status().find((x) => x.name === 'oldbuild')!;
    assert.deepEqual([seen.state, seen.reason, seen.refused?.update, seen.refused?.node_relay, seen.relay_version], ['offline', `update this node to relay ${packageVersion()}`, 'node', null, null]);
    // Updated (this version's hello): welcomed, and the refusal is gone.
    const again = await rawNode('oldbuild', n.joined);
    again.send({ ...again.hello, relay: packageVersion() });
    assert.equal((await again.next()).type, 'welcome');
    const now = hub.nodes.status().find((x) => x.name === 'oldbuild')!;
    assert.deepEqual([now.state, now.refused, now.relay_version], ['idle', null, packageVersion()]);
    again.session.close();
  });

  it('refuses a newer node of another protocol by the head of its hello alone: "update the hub"', async () => {
    // As a newer node dials: its own subprotocol, and a hello with only the fields every version keeps (protocol.ts).
    const n = await rawNode('future', undefined, 'relay.v99');
    assert.equal((n.session as unknown as { closed: boolean }).closed, false, 'let in as far as its hello');
    n.send({ type: 'hello', protocol: 99, node: 'future', llama: 'version: 9 (commit 9999999)', relay: '9.0.0', gpus: 'a shape this hub does not know' });
    const reply = await n.next();
    assert.equal(reply.code, 'version_mismatch');
    assert.match(
      String(reply.message),
      new RegExp(`^update the hub to relay 9\\.0\\.0: the node runs relay 9\\.0\\.0, the hub relay ${packageVersion()}; the tunnel protocol differs \\(hub ${PROTOCOL_VERSION}, node 99\\)`),
    );
    assert.equal(hub.nodes.status().find((x) => x.name === 'future')!.refused?.update, 'hub');
    // In the store, so the dashboard still says it after a restart of the hub; a revoke clears it.
    const stored = (JSON.parse(readFileSync(hub.store.path, 'utf8')) as { nodes: { name: string; refused?: { summary: string } }[] }).nodes.find((x) => x.name === 'future');
    assert.equal(stored?.refused?.summary, 'update the hub to relay 9.0.0');
    await hub.nodes.revoke('future');
    const revoked = hub.nodes.status().find((x) => x.name === 'future')!;
    assert.deepEqual([revoked.state, revoked.reason, revoked.refused], ['revoked', null, null]);
  });
});

describe('rpc streams', { timeout: 300_000 }, () => {
  it("llama-server on the hub uses a node's ggml-rpc-server through the tunnel: same text as one process; the rpc-server listens on 127.0.0.1 only", async () => {
    const nodeHome = mkdtempSync(join(tmpdir(), 'relay-node-'));
    const { credential, hubCert } = await joinHub(hub.url, hubJoinToken(home), 'rpcnode');
    const agent = new NodeAgent(nodeHome, { hub: hub.url, name: 'rpcnode', credential, hubCert, paused: false, schedule: '', cpuBudgetMb: 1000, cacheBudgetMb: 0 }, { log, install: llama() });
    await agent.start();
    try {
      if (!agent.connected) await once(agent, 'connected');
      const conn = hub.nodes.get('rpcnode')!;
      const started = await conn.command({ type: 'start-rpc', rpc: 'stage0', cache: true });
      const rpcPort = started.data!.port as number;
      let headPid: number | null = null; // the bridge takes the head's connections only
      const bridge = await openRpcBridge(conn, 'stage0', () => headPid);
      const model = fixture('dense');
      const single = await startLlamaServer(llama(), { model, ctx: 512, slots: 1, cacheType: 'f16' });
      const want = await complete(single.baseUrl, 'The quick brown fox', 24);
      await single.child.terminate(5000);
      const head = await startLlamaServer(llama(), {
        model,
        ctx: 512,
        slots: 1,
        cacheType: 'f16',
        rpc: [bridge.endpoint],
        devices: ['RPC0'],
        gpuLayers: 99,
        onSpawn: (c) => (headPid = c.pid ?? null),
      });
      try {
        const got = await complete(head.baseUrl, 'The quick brown fox', 24);
        assert.equal(got.text, want.text);
        assert.ok(head.child.output().some((l) => l.includes(`RPC0[${bridge.endpoint}] model buffer size`)));
        // Every tensor but the input embedding (which llama.cpp keeps on the host) crossed the tunnel.
        const onRpc = readGgufFile(model)
          .tensors.filter((t) => t.name !== 'token_embd.weight')
          .reduce((s, t) => s + t.bytes, 0);
        assert.ok(bridge.bytes.toNode >= onRpc, `${bridge.bytes.toNode} bytes crossed the tunnel, the remote tensors are ${onRpc}`);
        assert.equal(conn.bytes.rpc, bridge.bytes.toNode + bridge.bytes.fromNode);
      } finally {
        await head.child.terminate(5000);
        await bridge.close();
      }
      // Find the rpc-server by its port among the node's children: it must listen on loopback only.
      const { readdirSync, readFileSync } = await import('node:fs');
      const pids = readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(`--port\0${rpcPort}`);
          } catch {
            return false;
          }
        });
      assert.equal(pids.length, 1);
      const socks = listeningSockets(Number(pids[0]));
      assert.deepEqual(socks, [{ addr: '0100007F', port: rpcPort }]);
      await conn.command({ type: 'stop-rpc', rpc: 'stage0' });
    } finally {
      await agent.stop();
    }
  });
});
