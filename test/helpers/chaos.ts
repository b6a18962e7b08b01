import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import type { HubProcess } from './hub.js';
import type { NodeProcess } from './node.js';
import { until } from './proc.js';

/**
 * What the chaos tests break things with, and how they check that nothing was left behind.
 *
 * A link proxy stands between a node and its hub as the Wi-Fi does: `blackhole()` stops forwarding in both
 * directions without closing anything (the honest picture of a dead link or a sleeping laptop: no FIN, no RST,
 * just silence), new connections are accepted and never forwarded; `heal()` brings the link back (the stuck
 * connections are dropped, as the peers' TCP would once the other side gave up on them).
 */
export interface LinkProxy {
  readonly url: string;
  blackhole(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function linkProxy(hubUrl: string): Promise<LinkProxy> {
  const target = new URL(hubUrl);
  let dead = false;
  const pairs = new Set<[Socket, Socket]>();
  const held = new Set<Socket>();
  const server: Server = createServer((client) => {
    client.on('error', () => undefined);
    if (dead) {
      held.add(client); // a connect into a dead link: nothing answers
      client.pause();
      return;
    }
    const up = connect({ host: target.hostname, port: Number(target.port) });
    up.on('error', () => client.destroy());
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    const pair: [Socket, Socket] = [client, up];
    pairs.add(pair);
    client.on('data', (c: Buffer) => {
      if (!dead) up.write(c);
    });
    up.on('data', (c: Buffer) => {
      if (!dead) client.write(c);
    });
    client.once('close', () => pairs.delete(pair));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  const heal = (): void => {
    dead = false;
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
    pairs.clear();
    for (const s of held) s.destroy();
    held.clear();
  };
  return {
    url: `${target.protocol}//127.0.0.1:${port}`,
    blackhole() {
      dead = true;
      for (const [a, b] of pairs) {
        a.pause(); // bytes in flight stay unread: the sender's TCP fills and waits, as over a dead link
        b.pause();
      }
    },
    heal,
    async close() {
      heal();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Every llama-server and ggml-rpc-server whose parent is one of `parents` (the hub's and nodes' own children). */
export function llamaChildren(parents: readonly number[]): { pid: number; name: string; parent: number }[] {
  const out: { pid: number; name: string; parent: number }[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const parent = Number(fields[1]);
      if (fields[0] === 'Z' || !parents.includes(parent)) continue;
      if (name.startsWith('llama-server') || name.startsWith('ggml-rpc-server')) out.push({ pid: Number(d), name, parent });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/** The pids of every process the hub's /status accounts for: its placements, and what each node reports running. */
export async function listedPids(hub: HubProcess): Promise<Set<number>> {
  const st = await hub.status();
  const pids = new Set<number>();
  for (const p of [...st.replicas, ...st.shards]) if (p.pid !== null && p.state !== 'failed') pids.add(p.pid);
  for (const n of st.nodes) {
    if (!n.connected) continue;
    for (const r of n.replicas) if (r.pid !== null) pids.add(r.pid);
    for (const r of n.rpcs) if (r.pid !== null) pids.add(r.pid);
  }
  return pids;
}

/**
 * Nothing leaks: once the pool settles, every llama-server and rpc-server the hub and the nodes run is one the hub
 * lists (a node's own report included: a replica the hub does not expect is stopped by reconciliation).
 */
export async function assertNoStrays(hub: HubProcess, nodes: readonly NodeProcess[], limitMs = 45_000): Promise<void> {
  const parents = [hub.proc.pid!, ...nodes.filter((n) => n.proc.exitCode === null && n.proc.signalCode === null).map((n) => n.proc.pid!)];
  const strays = await until(
    async () => {
      const listed = await listedPids(hub);
      return llamaChildren(parents).filter((c) => !listed.has(c.pid));
    },
    (s) => s.length === 0,
    limitMs,
    250,
  );
  assert.deepEqual(strays, [], 'a llama-server or rpc-server runs that the hub does not list');
}

/** The store is readable and holds the model; the API still answers. */
export async function assertStoreIntact(hub: HubProcess, models: readonly string[]): Promise<void> {
  const r = await hub.api<{ models: { name: string; file: string }[] }>('/api/models');
  assert.equal(r.status, 200);
  for (const m of models) assert.equal(r.body.models.find((x) => x.name === m)?.file, 'ok', `${m} is registered and its file intact`);
}

/**
 * Every file in a node's cache hashes to the name it is kept under (an interrupted push left only a partial).
 * A link a test put there (a copy on the slow disk) is not relay's to check, and reading it would block this
 * process — and the link proxy it runs — for seconds.
 */
export function assertCacheIntact(node: NodeProcess): void {
  const dir = join(node.home, 'cache', 'models');
  for (const f of readdirSync(dir)) {
    if (!f.endsWith('.gguf') || lstatSync(join(dir, f)).isSymbolicLink()) continue;
    const sha = createHash('sha256')
      .update(readFileSync(join(dir, f)))
      .digest('hex');
    assert.equal(`${sha}.gguf`, f, `${node.name}'s cached ${f} is what its name says`);
  }
}
