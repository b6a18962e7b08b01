import { spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hubConfigFromEnv, type HubConfig } from '../../src/main/core/config.js';
import { readGgufFile } from '../../src/main/core/gguf/index.js';
import { startHub, type Hub } from '../../src/main/core/hub/index.js';
import { createLogger } from '../../src/main/core/log.js';
import { NodeAgent } from '../../src/main/core/node/agent.js';
import { joinHub } from '../../src/main/core/node/link/hub-client.js';
import fc from 'fast-check';
import { FNV_OFFSET, FNV_WASM_BUFFER, WasmFnv, fnv1a64Update, fnvHex } from '../../src/main/core/llama/fnv.js';
import { evictRpcCache, fillRpcCache, fillRpcCacheOffThread, rpcFillBytes, pruneRpcCache, recordLoadedFiles } from '../../src/main/core/node/cache/rpc-cache.js';
import { RPC_HASH_THRESHOLD, shareOut } from '../../src/main/core/llama/rpc-tensors.js';
import { StageWeights } from '../../src/main/core/llama/rpc-weights.js';
import { ModelCache } from '../../src/main/core/node/cache/cache.js';
import { hubJoinToken } from '../../src/main/core/pairing/tokens.js';
import { fixture, llama } from '../helpers/llama.js';
import { ensureSplitFixture } from '../fixtures/models.js';
import { until } from '../helpers/proc.js';

describe('FNV-1a 64 and the rpc cache files', () => {
  it('matches the reference vectors, in JavaScript and in WebAssembly', () => {
    const vectors: [string, string][] = [
      ['', 'cbf29ce484222325'],
      ['a', 'af63dc4c8601ec8c'],
      ['foobar', '85944171f73967e8'],
    ];
    for (const [text, hex] of vectors) {
      assert.equal(fnvHex(fnv1a64Update(FNV_OFFSET, Buffer.from(text))), hex);
      assert.equal(new WasmFnv().updateFrom(Buffer.from(text)).hex(), hex);
    }
    // Incremental = one pass.
    const s = fnv1a64Update(fnv1a64Update(FNV_OFFSET, Buffer.from('foo')), Buffer.from('bar'));
    assert.equal(fnvHex(s), '85944171f73967e8');
    assert.equal(new WasmFnv().updateFrom(Buffer.from('foo')).updateFrom(Buffer.from('bar')).hex(), '85944171f73967e8');
  });

  it('the WebAssembly hash equals the JavaScript one on any bytes and any split, across its 4 MiB buffer', () => {
    const wasm = new WasmFnv();
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(300), (data, cut) => {
        const at = Math.min(cut, data.length);
        return wasm.reset().updateFrom(data.subarray(0, at)).updateFrom(data.subarray(at)).hex() === fnvHex(fnv1a64Update(FNV_OFFSET, data));
      }),
      { numRuns: 300 },
    );
    const big = Buffer.alloc(FNV_WASM_BUFFER + 13);
    for (let i = 0; i < big.length; i++) big[i] = (i * 131 + (i >> 11)) & 0xff;
    assert.equal(wasm.reset().updateFrom(big).hex(), fnvHex(fnv1a64Update(FNV_OFFSET, big)));
    assert.throws(() => wasm.update(FNV_WASM_BUFFER + 1), RangeError);
  });

  it('shares tensors out to workers by bytes, each tensor once', () => {
    const spans = [5, 1, 4, 2, 3, 3].map((mb, i) => ({ tensor: `t${i}`, start: i, bytes: mb }));
    const groups = shareOut(spans, 2);
    assert.deepEqual(
      groups.map((g) => g.reduce((a, s) => a + s.bytes, 0)),
      [9, 9],
    );
    assert.deepEqual(
      groups
        .flat()
        .map((s) => s.tensor)
        .sort(),
      spans.map((s) => s.tensor).sort(),
    );
    assert.equal(shareOut(spans.slice(0, 1), 4).length, 1, 'no idle workers for one tensor');
  });

  it('writes one file per tensor over 10 MiB, named by its hash, idempotently; eviction removes them', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const path = fixture('large');
    const big = readGgufFile(path).tensors.filter((t) => t.bytes > RPC_HASH_THRESHOLD);
    const idx = fillRpcCache(path, 'a'.repeat(64), dir);
    assert.equal(idx.files.length, big.length);
    for (const f of idx.files) {
      assert.match(f.name, /^[0-9a-f]{16}$/);
      assert.equal(statSync(join(dir, f.name)).size, f.size);
    }
    assert.deepEqual(fillRpcCache(path, 'a'.repeat(64), dir), idx);
    evictRpcCache(dir, 'a'.repeat(64));
    assert.deepEqual(readdirSync(dir), []);
  });

  it("evicting one model keeps the files another model's index names too (the same tensor in both)", () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const path = fixture('large');
    const [one, two] = ['b'.repeat(64), 'c'.repeat(64)];
    const a = fillRpcCache(path, one, dir); // the same bytes registered twice: every file shared
    const b = fillRpcCache(path, two, dir, [1, 2]); // the second names only blk.1's
    assert.ok(b.files.length > 0 && b.files.length < a.files.length);
    evictRpcCache(dir, one);
    assert.deepEqual(readdirSync(dir).sort(), [...b.files.map((f) => f.name), `relay-index-${two}.json`].sort(), "the other model's files stay");
    evictRpcCache(dir, two);
    assert.deepEqual(readdirSync(dir), []);
  });

  it("pruning keeps the weights the indexes name (and a live fill's temporary file); what ggml-rpc-server saved besides, and a dead fill's, goes", () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const idx = fillRpcCache(fixture('large'), 'd'.repeat(64), dir, [1, 2]);
    // What this rpc-server saves of a long prompt: files named like weights, that no index names.
    for (const junk of ['05d6d197d9332325', '135f4ffc47132325']) writeFileSync(join(dir, junk), Buffer.alloc(12 << 20));
    writeFileSync(join(dir, `.relay-${process.pid}-1.tmp`), 'a fill under way');
    // A fill cut short by a crash: its process is gone, its temporary files (a tensor's, an index's) never renamed.
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    for (const f of [`.relay-${dead}-3.tmp`, `.relay-index-${dead}-3.tmp`]) writeFileSync(join(dir, f), Buffer.alloc(1 << 20));
    assert.equal(pruneRpcCache(dir), (24 << 20) + (2 << 20));
    assert.deepEqual(readdirSync(dir).sort(), [`.relay-${process.pid}-1.tmp`, ...idx.files.map((f) => f.name), `relay-index-${'d'.repeat(64)}.json`].sort());
    assert.equal(pruneRpcCache(dir), 0);
  });

  it("a stage's load: only the files the hub named, whole, become its weights; a file a full disk cut short goes", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const path = fixture('large');
    // What the load leaves when the head sent the stage's tensors in full: the server names each by its bytes' hash.
    const named = await new StageWeights().of([{ path, sha256: 'e'.repeat(64) }], [1, 2]);
    const written = fillRpcCache(path, 'x'.repeat(64), mkdtempSync(join(tmpdir(), 'relay-rpc-')), [1, 2]).files;
    assert.deepEqual(named.map((f) => f.name).sort(), written.map((f) => f.name).sort(), "the hub's names are the server's");
    assert.ok(named.length >= 2);
    const [whole, cut] = named;
    fillRpcCache(path, 'e'.repeat(64), dir, [1, 2]);
    rmSync(join(dir, `relay-index-${'e'.repeat(64)}.json`)); // as the load left them: unnamed
    // One of them cut short, as an unchecked write on a full disk leaves it; one more that is no weight of this stage.
    writeFileSync(join(dir, cut!.name), Buffer.alloc(cut!.size >> 1, 1));
    writeFileSync(join(dir, '05d6d197d9332325'), Buffer.alloc(12 << 20));
    const recorded = await recordLoadedFiles(dir, 'e'.repeat(64), named);
    assert.ok(recorded.some((f) => f.name === whole!.name));
    assert.ok(!recorded.some((f) => f.name === cut!.name), 'a short file is no weight');
    assert.ok(!existsSync(join(dir, cut!.name)), 'and it is gone');
    assert.equal(pruneRpcCache(dir), 12 << 20, 'what the hub did not name goes at the next prune');
    assert.ok(
      recorded.every((f) => existsSync(join(dir, f.name))),
      'the whole weights stay',
    );
  });

  it("weights a stage's load left for a model the node holds no copy of are room the budget can free, like a model file", () => {
    const root = mkdtempSync(join(tmpdir(), 'relay-cache-'));
    const cache = new ModelCache(root, 60 << 20, () => 1 << 40);
    const sha = '9'.repeat(64);
    const idx = fillRpcCache(fixture('large'), sha, cache.rpcCacheDir, [1, 2]);
    const held = idx.files.reduce((n, f) => n + f.size, 0);
    assert.ok(held > 30 << 20 && cache.usedBytes() >= held);
    cache.rpcLoading.add('a stage loads');
    assert.equal(cache.makeRoom(40 << 20), false, 'not during a load: its server may be reading them');
    cache.rpcLoading.delete('a stage loads');
    assert.equal(cache.makeRoom(40 << 20), true);
    assert.ok(!existsSync(join(cache.rpcCacheDir, `relay-index-${sha}.json`)) && idx.files.every((f) => !existsSync(join(cache.rpcCacheDir, f.name))));
  });

  it('pruning during fills keeps what was written since the first began; a damaged index names nothing and breaks nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const [old, fresh] = ['05d6d197d9332325', '135f4ffc47132325'];
    for (const f of [old, fresh]) writeFileSync(join(dir, f), Buffer.alloc(11 << 20));
    const fillStart = Date.now();
    utimesSync(join(dir, old), new Date(fillStart - 60_000), new Date(fillStart - 60_000)); // a prompt's, a minute ago
    assert.equal(pruneRpcCache(dir, fillStart), 11 << 20, 'only the file from before the fill began');
    assert.deepEqual(readdirSync(dir), [fresh]);
    // An index cut short (a crash mid-write before indexes were written whole): its files are no weights now.
    const sha = 'f'.repeat(64);
    writeFileSync(join(dir, `relay-index-${sha}.json`), '{"sha256":"ff');
    assert.equal(pruneRpcCache(dir), 11 << 20);
    assert.doesNotThrow(() => evictRpcCache(dir, sha));
    assert.deepEqual(readdirSync(dir), []);
    assert.equal(pruneRpcCache(join(dir, 'not-there')), 0, 'no cache yet: nothing to do');
  });

  it('FNV-1a 64 in 32-bit integer steps equals a BigInt reference on any bytes', () => {
    const ref = (data: Uint8Array): string => {
      let h = 0xcbf29ce484222325n;
      for (const b of data) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
      return h.toString(16).padStart(16, '0');
    };
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (data) => fnvHex(fnv1a64Update(FNV_OFFSET, data)) === ref(data)),
      { numRuns: 300 },
    );
  });

  it("a stage's fill caches only its layers' tensors, inside the budget, in workers while the event loop runs", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const path = fixture('large');
    const sha = 'b'.repeat(64);
    const blk1 = readGgufFile(path).tensors.filter((t) => t.name.startsWith('blk.1.') && t.bytes > RPC_HASH_THRESHOLD);
    assert.ok(blk1.length > 0);
    const need = rpcFillBytes(path, sha, dir, [1, 2]);
    assert.equal(
      need,
      blk1.reduce((a, t) => a + t.bytes, 0),
    );
    assert.throws(
      () => fillRpcCache(path, sha, dir, [1, 2], () => false),
      (e: Error & { code?: string }) => e.code === 'CACHE_FULL',
    );
    assert.deepEqual(readdirSync(dir), [], 'a refused fill writes nothing');
    let ticks = 0;
    const t = setInterval(() => ticks++, 5);
    await assert.rejects(
      fillRpcCacheOffThread(path, sha, dir, [1, 2], () => false),
      (e: Error & { code?: string }) => e.code === 'CACHE_FULL',
    );
    const idx = await fillRpcCacheOffThread(path, sha, dir, [1, 2], (bytes) => bytes === need, 2).finally(() => clearInterval(t));
    assert.ok(ticks > 0, 'the event loop kept running during the fill');
    assert.deepEqual(idx.files.map((f) => f.tensor).sort(), blk1.map((x) => x.name).sort());
    assert.equal(rpcFillBytes(path, sha, dir, [1, 2]), 0, 'done: a second fill adds nothing');
    assert.deepEqual(fillRpcCache(path, sha, dir, [1, 2]), idx);
    // Two workers' files carry the same names as one thread's JavaScript-checked fill of the same tensors.
    const one = mkdtempSync(join(tmpdir(), 'relay-rpc-'));
    const direct = fillRpcCache(path, sha, one, [1, 2]);
    assert.deepEqual(direct.files.map((f) => f.name).sort(), idx.files.map((f) => f.name).sort());
    // A second stage's fill of the same model keeps the first stage's entries in the index.
    const both = await fillRpcCacheOffThread(path, sha, dir, [0, 1], () => true, 2);
    assert.ok(
      idx.files.every((f) => both.files.some((b) => b.name === f.name)),
      "stage 1's files stay indexed",
    );
  });
});

describe('cold shard load without moving weights', { timeout: 300_000 }, () => {
  const log = createLogger({ level: 'warn', pretty: false });
  let hub: Hub;
  let agent: NodeAgent;
  let nodeHome: string;
  // The launcher reads rpcCacheFill at each shard start: the test changes it in place between the two loads.
  let config: { -readonly [K in keyof HubConfig]: HubConfig[K] };
  before(async () => {
    process.env.RELAY_THREADS = '1';
    const home = mkdtempSync(join(tmpdir(), 'relay-hub-'));
    config = hubConfigFromEnv({ HOME: tmpdir(), RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' }, { port: 0, home, cpuBudgetMb: 800 });
    hub = await startHub(config, {
      log,
      install: llama(),
    });
    nodeHome = mkdtempSync(join(tmpdir(), 'relay-node-'));
    const { credential, hubCert } = await joinHub(hub.url, hubJoinToken(home), 'cellar');
    agent = new NodeAgent(nodeHome, { hub: hub.url, name: 'cellar', credential, hubCert, paused: false, schedule: '', cpuBudgetMb: 800, cacheBudgetMb: 0 }, { log, install: llama() });
    await agent.start();
    if (!agent.connected) await once(agent, 'connected');
  });
  after(async () => {
    await agent?.stop();
    await hub?.close();
  });

  /** The single-file test's answer, which the split copy of the same weights must give too. */
  let large = '';
  async function coldLoad(fill: boolean, name = 'large'): Promise<{ bytes: number; text: string }> {
    rmSync(agent.cache.rpcCacheDir, { recursive: true, force: true }); // cold: nothing cached on the node
    config.rpcCacheFill = fill;
    const res = await fetch(`${hub.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: name, prompt: 'The sky', max_tokens: 8, temperature: 0, top_k: 1 }),
    });
    const j = (await res.json()) as { choices: { text: string }[] };
    assert.equal(res.status, 200, JSON.stringify(j));
    // The hub names the stage's weights once it has hashed them from its own copy (in workers, beside the load): on a
    // busy machine that can come after the first answer. The node is told, and lets go of its loading record.
    await until(
      () => agent.cache.rpcLoading.size,
      (n) => n === 0,
    );
    const [sh] = hub.scheduler.view.shardStatus().filter((x) => x.state === 'ready');
    const bytes = sh!.stages.reduce((a, st) => a + (st.rpc_bytes ?? 0), 0);
    await hub.scheduler.stopModel(name, 'next measurement');
    return { bytes, text: j.choices[0]!.text };
  }

  it("with the cache filled from the node's copy, no tensor over 10 MiB crosses the tunnel; same text", async () => {
    const path = fixture('large');
    await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name: 'large', required_vram_mb: 800 }) });
    const model = hub.store.data.models.find((m) => m.name === 'large')!;
    await hub.nodes.push(hub.nodes.get('cellar')!, model); // the node already holds the GGUF
    const without = await coldLoad(false);
    const withFill = await coldLoad(true);
    assert.equal(withFill.text, without.text);
    // The node's stage: llama.cpp numbering puts the CPU hub first, so the node holds blk.1.
    const bigRemote = readGgufFile(path)
      .tensors.filter((t) => t.name.startsWith('blk.1.') && t.bytes > RPC_HASH_THRESHOLD)
      .reduce((a, t) => a + t.bytes, 0);
    assert.ok(bigRemote > 30 * 1024 * 1024);
    assert.ok(without.bytes >= bigRemote, `without the fill ${without.bytes} bytes crossed (big tensors: ${bigRemote})`);
    assert.ok(withFill.bytes + bigRemote <= without.bytes + 1024 * 1024, `with the fill ${withFill.bytes} bytes crossed, without ${without.bytes}`);
    assert.ok(withFill.bytes < RPC_HASH_THRESHOLD, `with the fill ${withFill.bytes} bytes crossed`);
    // The filled files count in the node's cache and leave with the model.
    assert.ok(agent.cache.usedBytes() >= model.size + bigRemote);
    agent.cache.evict(model.sha256);
    assert.equal(existsSync(join(agent.cache.rpcCacheDir, `relay-index-${model.sha256}.json`)), false);
    large = withFill.text;
  });

  it("a stage's rpc-server that ends while it loads no longer holds off pruning the cache", async () => {
    mkdirSync(agent.cache.rpcCacheDir, { recursive: true });
    const junk = join(agent.cache.rpcCacheDir, '05d6d197d9332325');
    writeFileSync(junk, Buffer.alloc(1 << 20));
    const r = await agent.work.startRpc('probe', true);
    assert.ok(agent.cache.rpcLoading.has('probe'), 'loading until the hub says rpc-loaded');
    assert.equal(agent.cache.pruneRpcCache(), 0, 'nothing is pruned while a stage loads');
    process.kill(r.child.pid!, 'SIGKILL'); // it crashes mid-load
    await r.child.exited;
    await until(
      async () => agent.cache.rpcLoading.has('probe'),
      (loading) => !loading,
    );
    assert.equal(agent.cache.pruneRpcCache(), 1 << 20, 'pruned again once it is gone');
    assert.equal(existsSync(junk), false);
  });

  it('a split model: each part the node holds fills its tensors of the stage; same text as the unsplit file', async () => {
    const first = ensureSplitFixture('large', 3, { vocabDir: llama().vocabDir, seed: 1 }); // the weights of fixture('large')
    await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: first, name: 'large-split', required_vram_mb: 800 }) });
    const model = hub.store.data.models.find((m) => m.name === 'large-split')!;
    assert.equal(model.parts?.length, 3);
    await hub.nodes.push(hub.nodes.get('cellar')!, model); // every part, each a GGUF of its own
    const without = await coldLoad(false, 'large-split');
    const withFill = await coldLoad(true, 'large-split');
    assert.equal(without.text, withFill.text);
    if (large) assert.equal(withFill.text, large, 'the split file answers what the unsplit one did');
    const bigRemote = model.parts
      .flatMap((part) => readGgufFile(part.path).tensors)
      .filter((t) => t.name.startsWith('blk.1.') && t.bytes > RPC_HASH_THRESHOLD)
      .reduce((a, t) => a + t.bytes, 0);
    assert.ok(bigRemote > 30 * 1024 * 1024);
    assert.ok(without.bytes >= bigRemote, `without the fill ${without.bytes} bytes crossed (big tensors: ${bigRemote})`);
    assert.ok(withFill.bytes < RPC_HASH_THRESHOLD, `with the fill ${withFill.bytes} bytes crossed`);
    // Each part keeps the index of what it filled, and takes it along when it is evicted.
    const indexed = model.parts.filter((part) => existsSync(join(agent.cache.rpcCacheDir, `relay-index-${part.sha256}.json`)));
    assert.ok(indexed.length >= 1);
    for (const part of model.parts) agent.cache.evict(part.sha256);
    assert.deepEqual(
      model.parts.filter((part) => existsSync(join(agent.cache.rpcCacheDir, `relay-index-${part.sha256}.json`))),
      [],
    );
  });
});
