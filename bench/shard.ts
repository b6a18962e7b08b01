/**
 * bench/shard, in one run on loopback with the hub in this process and the node a `relay up` process of its own, as
 * deployed (CPU budgets force a 2-stage shard):
 *  - the same shard with RPC through the tunnel vs RPC over direct TCP (tok/s ratio, issue #26's target ≥ 0.95),
 *    and through a bare relay chain of two Node.js processes (the floor for any relay here);
 *  - bytes per generated token with the output on the hub (hub last) vs on the remote stage (hub first);
 *  - cold-load bytes and time with and without the node filling ggml-rpc-server's cache;
 *  - replica vs shard tok/s with 1 and 2 concurrent clients ("replicas scale, shards take turns").
 * `npm run bench -- shard`.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { hubConfigFromEnv, type HubConfig } from '../src/main/core/config.js';
import { startHub, type Hub } from '../src/main/core/hub/index.js';
import { startLlamaServer, startRpcServer } from '../src/main/core/llama/index.js';
import { createLogger } from '../src/main/core/log.js';
import { hubJoinToken } from '../src/main/core/pairing/tokens.js';
import { ensureFixture, type FixtureName } from '../test/fixtures/models.js';
import { llama } from '../test/helpers/llama.js';
import { startNode } from '../test/helpers/node.js';
import { openRpcBridge } from '../src/main/core/pool/rpc-bridge.js';
import { rpcRoundTrips } from './rpc-probe.js';
import { bareRpcChain, echoFloor, yamuxInProcess } from './echo-floor.js';
import { reportRatio } from './targets.js';
import { procCpu, procSyscalls, procWakeups } from './proc.js';
import { llamaChildren } from '../test/helpers/chaos.js';
import { median } from './stats.js';

const TOKENS = 64;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
async function gen(url: string, model: string, max = TOKENS): Promise<{ tps: number; text: string }> {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: max, temperature: 0, top_k: 1, ignore_eos: true }),
  });
  const j = (await r.json()) as { timings: { predicted_per_second: number }; choices: { text: string }[] };
  if (!r.ok) throw new Error(JSON.stringify(j));
  return { tps: j.timings.predicted_per_second, text: j.choices[0]!.text };
}

/** Aggregate tok/s of `clients` concurrent generations (tokens over wall time). */
async function concurrent(url: string, model: string, clients: number): Promise<number> {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, () => gen(url, model)));
  return (clients * TOKENS) / ((performance.now() - t0) / 1000);
}

const log = createLogger({ level: 'warn', pretty: false });
process.env.RELAY_THREADS = '1';
const home = mkdtempSync(join(tmpdir(), 'relay-bench-hub-'));
// The launcher reads rpcCacheFill and experimentOutputRemote at each shard start: the bench changes them in place.
const config: { -readonly [K in keyof HubConfig]: HubConfig[K] } = hubConfigFromEnv(
  { HOME: tmpdir(), RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '2', RELAY_THREADS: '1' },
  { port: 0, home, cpuBudgetMb: 800 },
);
const hub: Hub = await startHub(config, {
  log,
  install: llama(),
});
// The node in its own process: each end of the tunnel (TLS, WebSocket, yamux) on its own event loop, as on two machines.
const node = await startNode({ url: hub.url, home }, { name: 'bench', cpuBudgetMb: 800, token: hubJoinToken(home), env: { RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'warn', RELAY_HEARTBEAT_MS: '5000' } });

const add = async (name: string, fx: FixtureName, required?: number) => {
  const path = ensureFixture(fx, { vocabDir: llama().vocabDir });
  const res = await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name, required_vram_mb: required }) });
  if (!res.ok) throw new Error(`registering ${name}: ${res.status} ${await res.text()}`);
  return path;
};
const shardRoundTrips = (model: string) =>
  hub.scheduler.view
    .shardStatus()
    .filter((s) => s.model === model && s.state === 'ready')
    .flatMap((s) => s.stages)
    .reduce((a, st) => a + (st.rpc_round_trips ?? 0), 0);
const shardBytes = (model: string) =>
  hub.scheduler.view
    .shardStatus()
    .filter((s) => s.model === model && s.state === 'ready')
    .flatMap((s) => s.stages)
    .reduce((a, st) => a + (st.rpc_bytes ?? 0), 0);
const rows: string[] = [];
try {
  // 1. Tunnel vs direct TCP RPC for the same 2-stage shard.
  const densePath = await add('dense', 'large', 800);
  await gen(hub.url, 'dense', 4);
  const sh = hub.scheduler.view.shardStatus().find((s) => s.model === 'dense')!;
  const argv = readFileSync(`/proc/${sh.pid}/cmdline`, 'utf8').split('\0');
  const flag = (n: string) => argv[argv.indexOf(n) + 1]!;
  // The direct pair runs with the shard's own flags: the head's context, slots and tensor overrides, the device of the node's rpc-server.
  const nodeRpcPid = llamaChildren([node.proc.pid!]).find((c) => c.name.startsWith('ggml-rpc-server'))?.pid;
  const nodeRpc = nodeRpcPid === undefined ? [] : readFileSync(`/proc/${nodeRpcPid}/cmdline`, 'utf8').split('\0');
  const device = nodeRpc.includes('--device') ? nodeRpc[nodeRpc.indexOf('--device') + 1] : undefined;
  const rpc = await startRpcServer(llama(), { cache: false, device });
  // The floor for the whole shard: the same pair with a bare relay chain (two Node.js processes forwarding over a
  // TLS WebSocket, none of relay's code) between llama-server and a ggml-rpc-server of its own.
  const chainRpc = await startRpcServer(llama(), { cache: false, device });
  const chain = await bareRpcChain(chainRpc.port);
  const pair = (endpoint: string): Parameters<typeof startLlamaServer>[1] => ({
    model: densePath,
    ctx: Number(flag('--ctx-size')),
    slots: Number(flag('--parallel')),
    cacheType: 'f16',
    threads: 1,
    rpc: [endpoint],
    devices: ['RPC0'],
    gpuLayers: Number(flag('--n-gpu-layers')),
    tensorSplit: flag('--tensor-split').split(',').map(Number),
    overrides: argv.includes('--override-tensor')
      ? flag('--override-tensor')
          .split(',')
          .map((o) => ({ pattern: o.slice(0, o.lastIndexOf('=')), bufferType: o.slice(o.lastIndexOf('=') + 1) }))
      : [],
    fit: 'off',
  });
  const direct = await startLlamaServer(llama(), pair(rpc.endpoint));
  const chained = await startLlamaServer(llama(), pair(`127.0.0.1:${chain.port}`));
  const viaTunnel: number[] = [];
  const viaTcp: number[] = [];
  const viaChain: number[] = [];
  const rt0 = shardRoundTrips('dense');
  const session = hub.nodes.get('bench')!.session;
  const frames = () => session.stats.framesIn + session.stats.framesOut;
  let tunnelFrames = 0;
  const cpu = { hubUser: 0, hubSystem: 0, nodeUser: 0, nodeSystem: 0 };
  const io = { hubSys: 0, nodeSys: 0, hubWake: 0, nodeWake: 0 };
  const tunnel = async (): Promise<void> => {
    const f0 = frames();
    const c0 = process.cpuUsage();
    const n0 = procCpu(node.proc.pid!);
    const before = { hubSys: procSyscalls('self'), nodeSys: procSyscalls(node.proc.pid!), hubWake: procWakeups('self'), nodeWake: procWakeups(node.proc.pid!) };
    viaTunnel.push((await gen(hub.url, 'dense')).tps);
    const c = process.cpuUsage(c0);
    const n = procCpu(node.proc.pid!);
    cpu.nodeUser += n.user - n0.user;
    cpu.nodeSystem += n.system - n0.system;
    io.hubSys += procSyscalls('self') - before.hubSys;
    io.nodeSys += procSyscalls(node.proc.pid!) - before.nodeSys;
    io.hubWake += procWakeups('self') - before.hubWake;
    io.nodeWake += procWakeups(node.proc.pid!) - before.nodeWake;
    cpu.hubUser += c.user;
    cpu.hubSystem += c.system;
    tunnelFrames += frames() - f0;
  };
  const legs = [async () => void viaTcp.push((await gen(direct.baseUrl, 'dense')).tps), tunnel, async () => void viaChain.push((await gen(chained.baseUrl, 'dense')).tps)];
  // The three one after another in each round, in an order that rotates: no path always follows the same one.
  for (let i = 0; i < ROUNDS; i++) for (let k = 0; k < legs.length; k++) await legs[(i + k) % legs.length]!();
  // Where the gap comes from: ggml-rpc waits for the remote stage's answer several times per token, and each
  // wait crosses the tunnel (bridge, yamux, WebSocket, TLS, both ways) instead of one loopback TCP hop.
  const roundTripsPerToken = (shardRoundTrips('dense') - rt0) / (ROUNDS * TOKENS);
  await direct.child.terminate(5000);
  await chained.child.terminate(5000);
  chain.stop();
  await chainRpc.child.terminate(3000);
  // The smallest exchange, straight to a ggml-rpc-server and through a stage's bridge (a fresh rpc server on
  // the node: ggml-rpc-server serves one connection at a time).
  const probeDirect = await rpcRoundTrips(rpc.port);
  await rpc.child.terminate(3000);
  const conn = hub.nodes.get('bench')!;
  // The hub stops an rpc-server on the node that no shard of its own runs (at the node's next heartbeat): the
  // probe's can go mid-probe, and is then started again.
  let probeTunnel: number[] = [];
  for (let attempt = 1; ; attempt++) {
    await conn.command({ type: 'start-rpc', rpc: 'probe', cache: false }, 60_000);
    const bridge = await openRpcBridge(conn, 'probe', () => process.pid); // the probe connects from this process
    try {
      probeTunnel = await rpcRoundTrips(bridge.port);
      break;
    } catch (err) {
      if (attempt === 5) throw err;
    } finally {
      await bridge.close();
      await conn.command({ type: 'stop-rpc', rpc: 'probe' }, 30_000).catch(() => undefined);
    }
  }
  // The floor: one echo between two Node.js processes over a TLS WebSocket, plain and through yamux. A token's
  // round trip through the tunnel costs at least the plain one, whatever relay's own layers do.
  const floorWss = await echoFloor('wss');
  const floorYamux = await echoFloor('yamux');
  // The same back to back (each process sleeps only while the other answers), and yamux hot in one process: what
  // is left between those and the 5 ms figures is this machine's cost of running code just after a wake-up.
  const hotWss = await echoFloor('wss', 300, 0);
  const hotYamux = await echoFloor('yamux', 300, 0);
  const inProcess = await yamuxInProcess();
  // Each round ran TCP, tunnel and chain back to back: the median of the rounds' ratios pairs the machine's drifts out.
  const shardRatio = median(viaTunnel.map((t, i) => t / viaTcp[i]!));
  reportRatio('shard tok/s, rpc through the tunnel ÷ direct TCP (paired rounds)', shardRatio, 0.95);
  rows.push(
    '| 2-stage shard of the 137 MB fixture | RPC over direct TCP | RPC through the tunnel | ratio (paired) |',
    '| --- | --- | --- | --- |',
    `| generation tok/s (median of ${ROUNDS}) | ${median(viaTcp).toFixed(1)} | ${median(viaTunnel).toFixed(1)} | ${shardRatio.toFixed(3)} |`,
    `| the same through a bare relay chain in the same rounds (two Node.js processes forwarding over a TLS WebSocket, none of relay's code): the floor | | ${median(viaChain).toFixed(1)} | ${median(viaChain.map((t, i) => t / viaTcp[i]!)).toFixed(3)} |`,
    `| relay's tunnel ÷ the bare chain (paired rounds) | | | ${median(viaTunnel.map((t, i) => t / viaChain[i]!)).toFixed(3)} |`,
    '',
  );
  const addedMs = 1000 / median(viaTunnel) - 1000 / median(viaTcp);
  const usPerToken = (us: number): string => (us / (ROUNDS * TOKENS)).toFixed(0);
  rows.push(
    '| why | value |',
    '| --- | --- |',
    `| rpc round trips per generated token | ${roundTripsPerToken.toFixed(1)} |`,
    `| time added per token through the tunnel | ${addedMs.toFixed(2)} ms |`,
    `| = per round trip | ${roundTripsPerToken > 0 ? ((addedMs * 1000) / roundTripsPerToken).toFixed(0) : '-'} µs |`,
    `| yamux frames per generated token, both directions (the hub's session) | ${(tunnelFrames / (ROUNDS * TOKENS)).toFixed(1)} |`,
    `| CPU per generated token, user + system: the hub process (its tunnel end, the bridge, the request's HTTP) | ${usPerToken(cpu.hubUser)} + ${usPerToken(cpu.hubSystem)} µs |`,
    `| CPU per generated token, user + system: the node process (its tunnel end, its socket to ggml-rpc-server) | ${usPerToken(cpu.nodeUser)} + ${usPerToken(cpu.nodeSystem)} µs |`,
    `| socket reads + writes per generated token: the hub / the node | ${(io.hubSys / (ROUNDS * TOKENS)).toFixed(1)} / ${(io.nodeSys / (ROUNDS * TOKENS)).toFixed(1)} |`,
    `| main-thread wake-ups per generated token: the hub / the node | ${(io.hubWake / (ROUNDS * TOKENS)).toFixed(1)} / ${(io.nodeWake / (ROUNDS * TOKENS)).toFixed(1)} |`,
    `| smallest ggml-rpc round trip (DEVICE_COUNT), p50: direct TCP / through the tunnel | ${(median(probeDirect) * 1000).toFixed(0)} µs / ${(median(probeTunnel) * 1000).toFixed(0)} µs |`,
    `| 1 KiB echo between two Node.js processes, one every 5 ms, p50: a TLS WebSocket / relay's yamux over it | ${floorWss.p50.toFixed(0)} µs / ${floorYamux.p50.toFixed(0)} µs |`,
    `| the same echo back to back (each process sleeps only while the other answers), p50: a TLS WebSocket / relay's yamux over it | ${hotWss.p50.toFixed(0)} µs / ${hotYamux.p50.toFixed(0)} µs |`,
    `| the same in one process over an in-memory pair (yamux's code hot, nothing to wake), mean: the bare pair / yamux over it | ${inProcess.pair.toFixed(1)} µs / ${inProcess.yamux.toFixed(1)} µs |`,
    `| the most this machine allows with one such plain echo per round trip: direct ms per token ÷ (that + the echo) | ${(1000 / median(viaTcp) / (1000 / median(viaTcp) + (roundTripsPerToken * floorWss.p50) / 1000)).toFixed(3)} |`,
    '',
  );

  // 2. Bytes per token: output on the hub vs on the remote stage, two vocabulary sizes.
  await hub.scheduler.stopModel('dense', 'bench');
  await add('small', 'dense', 800);
  await add('wide', 'widevocab', 800);
  const perToken = async (m: string): Promise<number> => {
    await gen(hub.url, m, 1);
    const b0 = shardBytes(m);
    await gen(hub.url, m, 33);
    const v = (shardBytes(m) - b0) / 32;
    await hub.scheduler.stopModel(m, 'bench');
    return v;
  };
  const hubLast = { small: await perToken('small'), wide: await perToken('wide') };
  config.experimentOutputRemote = true;
  const hubFirst = { small: await perToken('small'), wide: await perToken('wide') };
  config.experimentOutputRemote = false;
  rows.push(
    '| bytes over the tunnel per generated token | 32,000-token vocabulary | 128,256-token vocabulary |',
    '| --- | --- | --- |',
    `| hub last (output and sampling on the hub) | ${hubLast.small.toFixed(0)} | ${hubLast.wide.toFixed(0)} |`,
    `| hub first (output on the remote stage, the experiment) | ${hubFirst.small.toFixed(0)} | ${hubFirst.wide.toFixed(0)} |`,
    `| hub first ÷ hub last | ${(hubFirst.small / hubLast.small).toFixed(2)} | ${(hubFirst.wide / hubLast.wide).toFixed(2)} |`,
    '',
  );

  // 3. Cold load with and without filling the rpc cache from the node's copy.
  const model = hub.store.data.models.find((m) => m.name === 'dense')!;
  await hub.nodes.push(hub.nodes.get('bench')!, model);
  const cold = async (fill: boolean) => {
    rmSync(join(node.home, 'cache', 'llama', 'rpc'), { recursive: true, force: true });
    config.rpcCacheFill = fill;
    const t0 = performance.now();
    await gen(hub.url, 'dense', 1);
    const seconds = (performance.now() - t0) / 1000;
    const bytes = shardBytes('dense');
    await hub.scheduler.stopModel('dense', 'bench');
    return { seconds, bytes };
  };
  const a = await cold(false);
  const b = await cold(true);
  config.rpcCacheFill = true;
  rows.push(
    '| cold shard load (first request, 137 MB fixture) | bytes over rpc streams | time to first answer |',
    '| --- | --- | --- |',
    `| node sends every tensor | ${(a.bytes / 1048576).toFixed(1)} MiB | ${a.seconds.toFixed(2)} s |`,
    `| node filled ggml-rpc-server's cache from its copy | ${(b.bytes / 1048576).toFixed(1)} MiB | ${b.seconds.toFixed(2)} s (includes the fill) |`,
    '',
  );

  // 4. Replicas scale, shards take turns: the same model as a replica on the node vs as a shard.
  await add('rep', 'large');
  const rep1 = await concurrent(hub.url, 'rep', 1);
  const rep2 = await concurrent(hub.url, 'rep', 2);
  await hub.scheduler.stopModel('rep', 'bench');
  await gen(hub.url, 'dense', 2);
  const sh1 = await concurrent(hub.url, 'dense', 1);
  const sh2 = await concurrent(hub.url, 'dense', 2);
  rows.push(
    '| aggregate tok/s | 1 client | 2 concurrent clients | 2 ÷ 1 |',
    '| --- | --- | --- | --- |',
    `| replica (whole model on one device) | ${rep1.toFixed(1)} | ${rep2.toFixed(1)} | ${(rep2 / rep1).toFixed(2)} |`,
    `| shard (2 stages, hub + node) | ${sh1.toFixed(1)} | ${sh2.toFixed(1)} | ${(sh2 / sh1).toFixed(2)} |`,
  );
} finally {
  await node.stop();
  await hub.close();
}
console.log(`\nshard: loopback, hub and node in two processes, 1 llama.cpp thread each, ${TOKENS} tokens per request\n`);
for (const r of rows) console.log(r);
