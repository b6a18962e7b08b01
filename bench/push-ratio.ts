/**
 * A weight push measured against its two ceilings, side by side: the hub (in this process) pushes a model to
 * a node agent (in this process too) over the pinned TLS tunnel, alternately with a raw TLS WebSocket carrying
 * the same bytes (nodes dial the hub over TLS: the wire's own ceiling) and sha256 of the file (the node
 * verifies every byte). Both ends share the process, as they share the machine in every row. The CPU time
 * per MiB of each says why the push cannot reach the lower ceiling on a small machine: it does the work of
 * both (and writes the file), and they compete for the same cores.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { WebSocket, WebSocketServer } from 'ws';
import { hubConfigFromEnv } from '../src/main/core/config.js';
import { startHub, type Hub } from '../src/main/core/hub/index.js';
import type { Logger } from '../src/main/core/log.js';
import { NodeAgent } from '../src/main/core/node/agent.js';
import { joinHub } from '../src/main/core/node/link/hub-client.js';
import { selfSignedCert } from '../src/main/core/pairing/hub-cert.js';
import { hubJoinToken } from '../src/main/core/pairing/tokens.js';
import { llama } from '../test/helpers/llama.js';
import { median } from './stats.js';

const CHUNK = Buffer.alloc(256 * 1024, 7);

export /** A raw WebSocket pair on loopback; with `tls`, over TLS with a self-signed certificate like the hub's. */
async function rawWsPair(tls: boolean): Promise<{ client: WebSocket; server: WebSocket; close: () => Promise<void> }> {
  const cert = tls ? selfSignedCert('bench') : null;
  const https = cert ? createHttpsServer({ cert: cert.cert, key: cert.key }) : null;
  if (https) await new Promise<void>((r) => https.listen(0, '127.0.0.1', () => r()));
  const wss = https ? new WebSocketServer({ server: https, perMessageDeflate: false }) : new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  if (!https) await once(wss, 'listening');
  const port = ((https ?? wss).address() as AddressInfo).port;
  const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
  const client = new WebSocket(`${tls ? 'wss' : 'ws'}://127.0.0.1:${port}`, { perMessageDeflate: false, rejectUnauthorized: false }); // loopback, the bench's own certificate
  await once(client, 'open');
  const [server] = await accepted;
  return {
    client,
    server,
    close: () =>
      new Promise((r) => {
        client.terminate();
        wss.close(() => (https ? https.close(() => r()) : r()));
      }),
  };
}

/** `bytes` over a raw WebSocket (plain or TLS) as 256 KiB binary messages, sender paced by bufferedAmount; MB/s. */
export async function bulkRawWs(bytes: number, tls = false): Promise<number> {
  const p = await rawWsPair(tls);
  let got = 0;
  const done = new Promise<void>((r) =>
    p.server.on('message', (m: Buffer) => {
      got += m.byteLength;
      if (got >= bytes) r();
    }),
  );
  const t0 = performance.now();
  for (let sent = 0; sent < bytes; sent += CHUNK.byteLength) {
    p.client.send(CHUNK);
    while (p.client.bufferedAmount > 4 * 1024 * 1024) await new Promise((r) => setImmediate(r));
  }
  await done;
  const mbs = bytes / 1048576 / ((performance.now() - t0) / 1000);
  await p.close();
  return mbs;
}

/** sha256 of the file as the node computes it (read and hashed once); MB/s. */
async function shaRate(path: string, size: number): Promise<number> {
  const h = createHash('sha256');
  const t0 = performance.now();
  for await (const c of createReadStream(path, { highWaterMark: 1024 * 1024 })) h.update(c as Buffer);
  h.digest();
  return size / 1048576 / ((performance.now() - t0) / 1000);
}

/** A hub and one joined node agent in this process. */
export async function hubWithNode(log: Logger): Promise<{ hub: Hub; agent: NodeAgent; close: () => Promise<void> }> {
  const home = mkdtempSync(join(tmpdir(), 'relay-bench-hub-'));
  const hub = await startHub(hubConfigFromEnv({ HOME: tmpdir(), RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' }, { port: 0, home }), { log, install: llama() });
  const nodeHome = mkdtempSync(join(tmpdir(), 'relay-bench-node-'));
  const { credential, hubCert } = await joinHub(hub.url, hubJoinToken(home), 'bench');
  const agent = new NodeAgent(nodeHome, { hub: hub.url, name: 'bench', credential, hubCert, paused: false, schedule: '', cpuBudgetMb: 4000, cacheBudgetMb: 0 }, { log, install: llama() });
  await agent.start();
  if (!agent.connected) await once(agent, 'connected');
  return {
    hub,
    agent,
    close: async () => {
      await agent.stop();
      await hub.close();
      rmSync(nodeHome, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    },
  };
}

export interface PushRatio {
  push: number;
  raw: number;
  tls: number;
  sha: number;
  ratio: number;
  /** CPU time (every thread of this process, user + system) per MiB moved: push, raw TLS WebSocket, sha256. */
  cpu: { push: number; tls: number; sha: number };
}

/** MB/s of `run` and the process's CPU µs per MiB while it ran. */
async function withCpu(bytes: number, run: () => Promise<number>): Promise<[number, number]> {
  const c0 = process.cpuUsage();
  const mbs = await run();
  const c = process.cpuUsage(c0);
  return [mbs, (c.user + c.system) / (bytes / 1048576)];
}

/**
 * Registers `path` as `name`, then `rounds` rounds of: push (evicted from the node first), raw TLS WebSocket,
 * raw WebSocket, sha256 — after one warm-up push. Medians; `ratio` = push ÷ min(raw TLS WebSocket, sha256).
 */
export async function pushRatio(h: { hub: Hub; agent: NodeAgent }, path: string, name: string, rounds: number): Promise<PushRatio> {
  const r = await fetch(`${h.hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name }) });
  if (!r.ok) throw new Error(`register ${name}: ${r.status} ${await r.text()}`);
  const conn = h.hub.nodes.get('bench')!;
  const model = h.hub.store.data.models.find((m) => m.name === name)!;
  const push = async (): Promise<number> => {
    if (h.agent.cache.has(model.sha256)) h.agent.cache.evict(model.sha256);
    conn.cache.delete(model.sha256);
    const t0 = performance.now();
    await h.hub.nodes.push(conn, model);
    return model.size / 1048576 / ((performance.now() - t0) / 1000);
  };
  await push();
  const pushes: number[] = [];
  const raws: number[] = [];
  const tlss: number[] = [];
  const shas: number[] = [];
  const cpu = { push: [] as number[], tls: [] as number[], sha: [] as number[] };
  const size = model.size;
  for (let i = 0; i < rounds; i++) {
    const [p, pc] = await withCpu(size, push);
    const [t, tc] = await withCpu(size, () => bulkRawWs(size, true));
    const [s, sc] = await withCpu(size, () => shaRate(path, size));
    pushes.push(p);
    tlss.push(t);
    shas.push(s);
    cpu.push.push(pc);
    cpu.tls.push(tc);
    cpu.sha.push(sc);
    raws.push(await bulkRawWs(size));
  }
  if (h.agent.cache.has(model.sha256)) h.agent.cache.evict(model.sha256);
  const out = { push: median(pushes), raw: median(raws), tls: median(tlss), sha: median(shas) };
  return { ...out, ratio: out.push / Math.min(out.tls, out.sha), cpu: { push: median(cpu.push), tls: median(cpu.tls), sha: median(cpu.sha) } };
}
