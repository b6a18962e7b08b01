/**
 * `npm run soak`: the pool under the faults a household's machines and Wi-Fi produce, for a while. A hub (its
 * CPU budget holds one replica) and two nodes, `n1` behind a link proxy, `n2` direct; SOAK_CLIENTS concurrent
 * clients (4) send streaming and plain completions for SOAK_MS (10 minutes); every SOAK_FAULT_MS (~30 s, at
 * random ±50 %) one fault from the chaos set hits a random node: its agent stopped for 8 s (a laptop asleep),
 * killed and restarted, its link dead for 8 s (n1), its replica's llama-server stopped or killed. Then the pool
 * is restored and left to settle, and the table says: requests served, clean errors (an HTTP error with a code,
 * or an SSE stream that ends with its error event), hung requests (no answer within 60 s: target 0), unclean
 * ends (a stream cut without an error event, a reset: target 0), leaked processes (a llama-server or
 * rpc-server the hub does not list: target 0), and how long the hub took to find a dead node (from the fault to
 * its "node disconnected"). Not part of `npm test`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fixture } from '../test/helpers/llama.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { startNode, type NodeProcess } from '../test/helpers/node.js';
import { linkProxy, listedPids, llamaChildren } from '../test/helpers/chaos.js';
import { until } from '../test/helpers/proc.js';

// What the hub and nodes write to the temp dir goes to one folder, removed on exit.
const soakTmp = mkdtempSync(join(tmpdir(), 'relay-soak-'));
process.env.TMPDIR = soakTmp;
process.on('exit', () => rmSync(soakTmp, { recursive: true, force: true }));

const DURATION_MS = Number(process.env.SOAK_MS ?? 600_000);
const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 4);
const FAULT_MS = Number(process.env.SOAK_FAULT_MS ?? 30_000);
const REQUEST_LIMIT_MS = 60_000;
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

type Outcome = 'served' | 'clean error' | 'hung' | 'unclean';
const outcomes: Record<Outcome, number> = { served: 0, 'clean error': 0, hung: 0, unclean: 0 };
const codes = new Map<string, number>();

async function oneRequest(url: string, i: number): Promise<Outcome> {
  const stream = Math.random() < 0.6;
  const body = { model: 'm', prompt: `Request ${i}: once upon a time`, max_tokens: 8 + Math.floor(Math.random() * 160), temperature: 0, stream };
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), REQUEST_LIMIT_MS);
  try {
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: ac.signal });
    const text = await res.text();
    if (res.status !== 200) {
      const code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
      if (!code) return 'unclean';
      codes.set(code, (codes.get(code) ?? 0) + 1);
      return 'clean error';
    }
    if (!stream) return (JSON.parse(text) as { choices?: unknown[] }).choices ? 'served' : 'unclean';
    if (text.trimEnd().endsWith('data: [DONE]')) return 'served';
    const last = text.trimEnd().split('\n\n').at(-1) ?? '';
    const code = /"code":"([a-z_]+)"/.exec(last)?.[1];
    if (code && last.includes('"error"')) {
      codes.set(code, (codes.get(code) ?? 0) + 1);
      return 'clean error';
    }
    return 'unclean';
  } catch (err) {
    return ac.signal.aborted ? 'hung' : (console.log(`# unclean: ${(err as Error).message}`), 'unclean');
  } finally {
    clearTimeout(timer);
  }
}

const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
const proxy = await linkProxy(hub.url);
await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
let n1: NodeProcess = await startNode({ url: proxy.url, home: hub.home }, { name: 'n1', cpuBudgetMb: 800, env: ENV });
let n2: NodeProcess = await startNode(hub, { name: 'n2', cpuBudgetMb: 800, env: ENV });
const node = (name: string): NodeProcess => (name === 'n1' ? n1 : n2);

// "node disconnected" lines, by node, with the hub's own timestamps.
const disconnects: { node: string; at: number }[] = [];
createInterface({ input: hub.proc.stderr! }).on('line', (l) => {
  if (!l.includes('node disconnected')) return;
  try {
    const j = JSON.parse(l) as { node?: string; time?: number };
    if (j.node && j.time) disconnects.push({ node: j.node, at: j.time });
  } catch {
    /* a pretty line */
  }
});

const faults = new Map<string, number>();
const detect: number[] = [];
async function inject(): Promise<void> {
  const name = Math.random() < 0.5 ? 'n1' : 'n2';
  const n = node(name);
  const kinds = ['agent SIGSTOP 8 s', 'agent SIGKILL', 'llama-server SIGSTOP', 'llama-server SIGKILL', ...(name === 'n1' ? ['link dead 8 s'] : [])];
  const kind = kinds[Math.floor(Math.random() * kinds.length)]!;
  const at = Date.now();
  faults.set(kind, (faults.get(kind) ?? 0) + 1);
  console.log(`# ${new Date(at).toISOString()} ${kind} on ${name}`);
  const found = async (): Promise<void> => {
    const d = await until(
      () => disconnects.find((x) => x.node === name && x.at >= at),
      (x) => x !== undefined,
      30_000,
    );
    if (d) detect.push(d.at - at);
    else console.log(`# ${name} was not found dead within 30 s`);
  };
  if (kind === 'agent SIGSTOP 8 s') {
    n.proc.kill('SIGSTOP');
    await Promise.all([found(), new Promise((r) => setTimeout(r, 8000))]);
    n.proc.kill('SIGCONT');
  } else if (kind === 'link dead 8 s') {
    proxy.blackhole();
    await Promise.all([found(), new Promise((r) => setTimeout(r, 8000))]);
    proxy.heal();
  } else if (kind === 'agent SIGKILL') {
    await n.kill9();
    await new Promise((r) => setTimeout(r, 3000));
    const again = await startNode(name === 'n1' ? { url: proxy.url, home: hub.home } : hub, { name, cpuBudgetMb: 800, env: ENV, home: n.home, token: null });
    if (name === 'n1') n1 = again;
    else n2 = again;
  } else {
    const st = await hub.status();
    const r = st.replicas.find((x) => x.node === name && x.state === 'ready' && x.pid !== null);
    if (r) process.kill(r.pid!, kind === 'llama-server SIGSTOP' ? 'SIGSTOP' : 'SIGKILL');
    else console.log(`# (no replica on ${name} right now)`);
  }
}

const t0 = performance.now();
const end = Date.now() + DURATION_MS;
let next = 0;
const clients = Array.from({ length: CLIENTS }, async () => {
  while (Date.now() < end) outcomes[await oneRequest(hub.url, next++)]++;
});
const chaos = (async () => {
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, FAULT_MS * (0.5 + Math.random())));
    if (Date.now() < end) await inject().catch((err: unknown) => console.log(`# fault failed: ${String(err)}`));
  }
})();
await Promise.all([...clients, chaos]);
const minutes = (performance.now() - t0) / 60_000;

// Restore the pool, let it settle, then look for anything left running that the hub does not list.
proxy.heal();
for (const n of [n1, n2]) if (n.proc.exitCode === null) n.proc.kill('SIGCONT');
await until(
  async () => (await hub.status()).nodes.every((x) => x.connected),
  (x) => x,
  60_000,
);
const strays = await until(
  async () => {
    const listed = await listedPids(hub);
    return llamaChildren([hub.proc.pid!, n1.proc.pid!, n2.proc.pid!]).filter((c) => !listed.has(c.pid));
  },
  (s) => s.length === 0,
  60_000,
  500,
);

const sorted = [...detect].sort((a, b) => a - b);
const pct = (p: number): string => (sorted.length ? `${(sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! / 1000).toFixed(1)} s` : 'n/a');
const total = Object.values(outcomes).reduce((a, b) => a + b, 0);
console.log(`\n=== soak (${new Date().toISOString().slice(0, 10)}, ${availableParallelism()} cores, ${cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB) ===\n`);
console.log('| figure | this run | target |');
console.log('| --- | --- | --- |');
console.log(`| duration, clients | ${minutes.toFixed(1)} min, ${CLIENTS} | 10 min |`);
console.log(`| faults injected | ${[...faults].map(([k, v]) => `${k} ×${v}`).join(', ') || 'none'} | one every ~${Math.round(FAULT_MS / 1000)} s |`);
console.log(`| requests | ${total} | |`);
console.log(`| served | ${outcomes.served} | |`);
console.log(`| clean errors | ${outcomes['clean error']} (${[...codes].map(([k, v]) => `${k} ×${v}`).join(', ') || 'none'}) | |`);
console.log(`| hung requests (no answer in 60 s) | ${outcomes.hung} | 0 |`);
console.log(`| unclean ends (cut without an error event) | ${outcomes.unclean} | 0 |`);
console.log(`| leaked processes | ${strays.length} | 0 |`);
console.log(`| time to find a dead node, p50 / p99 / max (${sorted.length}) | ${pct(50)} / ${pct(99)} / ${pct(100)} | ≤ 5 s with a request on it, ≤ 15 s idle |`);

await proxy.close();
await n1.stop();
await n2.stop();
await hub.stop();
process.exit(outcomes.hung === 0 && outcomes.unclean === 0 && strays.length === 0 ? 0 : 1);
