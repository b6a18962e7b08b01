import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { cliConfigFromEnv, hubConfigFromEnv, nodeConfigFromEnv } from '../../src/main/core/config.js';
import { mergeDevices } from '../../src/main/core/gpu/inventory.js';
import { parseNvidiaSmi } from '../../src/main/core/gpu/smi.js';
import { readNvml } from '../../src/main/core/gpu/nvml.js';
import { usageFromTail } from '../../src/main/core/hub/proxy/llama-answer.js';
import { HubMetrics } from '../../src/main/core/hub/state/metrics.js';
import { SCHEMA_VERSION, Store } from '../../src/main/core/store/store.js';
import { createLogger } from '../../src/main/core/log.js';

const home = () => mkdtempSync(join(tmpdir(), 'relay-home-'));

describe('store', () => {
  it('creates a fresh store and persists updates as whole JSON files', async () => {
    const h = home();
    const s = await Store.open(h);
    await s.update((d) => d.models.push({ name: 'm' } as never));
    const onDisk = JSON.parse(readFileSync(join(h, 'relay.json'), 'utf8'));
    assert.equal(onDisk.schemaVersion, SCHEMA_VERSION);
    assert.equal(onDisk.models[0].name, 'm');
    const again = await Store.open(h);
    assert.equal(again.data.models.length, 1);
  });

  it('migrates a v1 store (models without the embedding flag) and keeps a backup of the original', async () => {
    const h = home();
    const v1 = { models: [{ name: 'old', path: '/m.gguf', sha256: 'ab' }] };
    writeFileSync(join(h, 'relay.json'), JSON.stringify(v1));
    const s = await Store.open(h);
    assert.equal(s.migratedFrom, 1);
    assert.equal(s.data.schemaVersion, SCHEMA_VERSION);
    assert.equal(s.data.models[0]!.embedding, false);
    assert.deepEqual(s.data.nodes, []);
    assert.deepEqual(JSON.parse(readFileSync(join(h, 'relay.json.v1.bak'), 'utf8')), v1);
    assert.equal(JSON.parse(readFileSync(join(h, 'relay.json'), 'utf8')).schemaVersion, SCHEMA_VERSION);
  });

  it('reports an unreadable store with its path and leaves it untouched', async () => {
    for (const text of ['{"models": [', '[1,2]', '{"schemaVersion": 99, "models": []}', '{"schemaVersion": 2, "models": 5}']) {
      const h = home();
      const p = join(h, 'relay.json');
      writeFileSync(p, text);
      await assert.rejects(Store.open(h), (e: unknown) => isRelayError(e, 'STORE_UNREADABLE') && e.message.includes(p) && /untouched/.test(e.message));
      assert.equal(readFileSync(p, 'utf8'), text);
      assert.equal(existsSync(`${p}.v1.bak`), false);
    }
  });

  it('serializes concurrent updates', async () => {
    const s = await Store.open(home());
    await Promise.all(Array.from({ length: 50 }, (_, i) => s.update((d) => d.models.push({ name: `m${i}` } as never))));
    assert.equal(s.data.models.length, 50);
  });
});

describe('config', () => {
  it('the node and the CLI read their environment in one place each, with the documented defaults', () => {
    assert.deepEqual(nodeConfigFromEnv({}), { threads: undefined, orphanMs: 60_000, heartbeatMs: 5000 });
    assert.deepEqual(nodeConfigFromEnv({ RELAY_THREADS: '2', RELAY_NODE_ORPHAN_MS: '1500', RELAY_HEARTBEAT_MS: '500' }), { threads: 2, orphanMs: 1500, heartbeatMs: 500 });
    assert.throws(
      () => nodeConfigFromEnv({ RELAY_NODE_ORPHAN_MS: 'soon' }),
      (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT'),
    );
    assert.deepEqual(cliConfigFromEnv({}), { hubUrl: 'http://127.0.0.1:7070', adminToken: undefined, nodeHome: undefined });
    assert.deepEqual(cliConfigFromEnv({ RELAY_HUB_URL: 'http://desk:7070', RELAY_ADMIN_TOKEN: 't', RELAY_NODE_HOME: '/n' }), { hubUrl: 'http://desk:7070', adminToken: 't', nodeHome: '/n' });
  });

  it('has documented defaults', () => {
    const c = hubConfigFromEnv({ HOME: '/home/x' });
    assert.deepEqual([c.port, c.host, c.contextSize, c.replicaCtx, c.parallelSlots, c.kvCacheType, c.flashAttn, c.cpuBudgetMb], [7070, '127.0.0.1', 4096, 0, 2, 'f16', undefined, 0]);
    assert.equal(c.home, '/home/x/.local/share/relay');
  });

  it("reads the spec's variables and lets flags override them", () => {
    const c = hubConfigFromEnv(
      { RELAY_KV_CACHE_TYPE: 'q4_0', RELAY_CONTEXT_SIZE: '8192', RELAY_REPLICA_CTX: '2048', RELAY_PARALLEL_SLOTS: '4', RELAY_FLASH_ATTN: 'off', RELAY_HOME: '/d' },
      { port: 0, cpuBudgetMb: 3000 },
    );
    assert.deepEqual([c.kvCacheType, c.contextSize, c.replicaCtx, c.parallelSlots, c.flashAttn, c.home, c.port, c.cpuBudgetMb], ['q4_0', 8192, 2048, 4, 'off', '/d', 0, 3000]);
  });

  it('a relative RELAY_DOWNLOAD_DIR is where the hub was started (the registry keeps absolute paths: a pull would fail only after its download)', () => {
    assert.equal(hubConfigFromEnv({ HOME: '/h', RELAY_DOWNLOAD_DIR: 'models/hf' }).downloadDir, join(process.cwd(), 'models', 'hf'));
    assert.equal(hubConfigFromEnv({ HOME: '/h' }).downloadDir, undefined);
  });

  it('refuses nonsense with INVALID_ARGUMENT naming the variable', () => {
    for (const [env, re] of [
      [{ RELAY_KV_CACHE_TYPE: 'q5_1' }, /RELAY_KV_CACHE_TYPE/],
      [{ RELAY_FLASH_ATTN: 'maybe' }, /RELAY_FLASH_ATTN/],
      [{ RELAY_PARALLEL_SLOTS: '0' }, /RELAY_PARALLEL_SLOTS/],
      [{ RELAY_CONTEXT_SIZE: 'lots' }, /RELAY_CONTEXT_SIZE/],
    ] as const) {
      assert.throws(
        () => hubConfigFromEnv(env),
        (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT') && re.test(e.message),
      );
    }
  });
});

describe('devices', () => {
  it('parses nvidia-smi csv', () => {
    assert.deepEqual(parseNvidiaSmi('0, NVIDIA GeForce GTX 1060 6GB, 6144, 5800, 3\n1, NVIDIA RTX 4070 SUPER, 12282, 11000, [N/A]\n'), [
      { index: 0, name: 'NVIDIA GeForce GTX 1060 6GB', totalMb: 6144, freeMb: 5800, utilizationPct: 3, busId: null, uuid: null, source: 'nvidia-smi' },
      { index: 1, name: 'NVIDIA RTX 4070 SUPER', totalMb: 12282, freeMb: 11000, utilizationPct: null, busId: null, uuid: null, source: 'nvidia-smi' },
    ]);
  });

  it("NVML through koffi: readings where NVIDIA's driver is loaded, otherwise null without an error", () => {
    const r = readNvml();
    if (existsSync('/proc/driver/nvidia')) {
      assert.ok(Array.isArray(r) && r.length > 0 && r.every((g) => g.totalMb > 0 && g.freeMb <= g.totalMb));
    } else {
      assert.equal(r, null);
    }
  });

  it('merges llama-server devices with driver readings; CPU appears only with a budget; RPC is not host capacity', () => {
    const listed = [
      { name: 'CUDA0', description: 'GTX 1060', totalMib: 6144, freeMib: 6000 },
      { name: 'RPC0', description: '127.0.0.1:1', totalMib: 1, freeMib: 1 },
    ];
    const readings = [{ index: 0, name: 'GTX 1060', totalMb: 6144, freeMb: 5000, utilizationPct: 40, busId: '00000000:01:00.0', uuid: 'GPU-1', source: 'nvml' as const }];
    assert.deepEqual(
      mergeDevices(listed, readings, 0).map((d) => [d.id, d.reportedFreeMb, d.utilizationPct, d.source]),
      [['CUDA0', 5000, 40, 'nvml']],
    );
    assert.deepEqual(mergeDevices([], null, 0), []);
    assert.deepEqual(
      mergeDevices([], null, 1500).map((d) => [d.id, d.kind, d.totalMb]),
      [['CPU', 'cpu', 1500]],
    );
  });
});

describe('hub helpers', () => {
  it('reads token usage from a JSON body or the last SSE chunk', () => {
    // What an answer did not report is null.
    const unsaid = { tokensPerSecond: null, cachedTokens: null, promptMs: null, promptEvaluated: null, drafted: null, draftAccepted: null };
    assert.deepEqual(usageFromTail('{"usage":{"completion_tokens":8,"prompt_tokens":29}}'), { ...unsaid, promptTokens: 29, completionTokens: 8 });
    const sse = 'data: {"choices":[]}\n\ndata: {"timings":{"prompt_n":5,"prompt_ms":2.5,"predicted_n":16,"predicted_per_second":250.5}}\n\ndata: [DONE]\n\n';
    assert.deepEqual(usageFromTail(sse), { ...unsaid, promptTokens: 5, completionTokens: 16, tokensPerSecond: 250.5, promptMs: 2.5, promptEvaluated: 5 });
    assert.equal(usageFromTail('data: [DONE]'), null);
    assert.equal(usageFromTail('data: {"timings":{"cache_n":8,"prompt_n":44,"predicted_n":3}}')?.promptTokens, 52, 'the cached part of the prompt counts');
    // llama-server's OpenAI answers say the cached part twice (usage and timings): once; with a draft model, its counts.
    const both =
      '{"usage":{"completion_tokens":4,"prompt_tokens":59,"prompt_tokens_details":{"cached_tokens":58}},"timings":{"cache_n":58,"prompt_n":1,"prompt_ms":0.9,"draft_n":6,"draft_n_accepted":5}}';
    assert.deepEqual(usageFromTail(both), { ...unsaid, promptTokens: 59, completionTokens: 4, cachedTokens: 58, promptMs: 0.9, promptEvaluated: 1, drafted: 6, draftAccepted: 5 });
    // Anthropic: cache reads are prompt tokens too; a stream's input tokens come in its first event, its output in its last.
    assert.deepEqual(usageFromTail('{"usage":{"cache_read_input_tokens":22,"input_tokens":1,"output_tokens":8}}'), { ...unsaid, promptTokens: 23, completionTokens: 8, cachedTokens: 22 });
    const start = 'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":0}}}\n\n';
    const end = 'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":40}}\n\n';
    assert.deepEqual(usageFromTail(end, start), { ...unsaid, promptTokens: 12, completionTokens: 40 });
  });

  it('renders Prometheus text', () => {
    const m = new HubMetrics();
    m.requests.add({ endpoint: 'completions', status: '200' });
    m.requests.add({ endpoint: 'completions', status: '200' });
    const text = m.render({ replicas: ['ready', 'failed', 'ready'], shards: ['starting'] });
    assert.match(text, /# TYPE relay_requests_total counter\nrelay_requests_total\{endpoint="completions",status="200"\} 2/);
    assert.match(text, /relay_replicas\{state="ready"\} 2/);
    assert.match(text, /relay_replicas\{state="failed"\} 1/);
    assert.match(text, /relay_shards\{state="starting"\} 1\nrelay_shards\{state="ready"\} 0/);
  });
});

describe('file log (the tray app)', () => {
  it('appends JSON lines to the file, and keeps an oversized one as .1 at start', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-log-'));
    const file = join(dir, 'logs', 'relay.log');
    createLogger({ name: 'tray', file }).info('first');
    createLogger({ name: 'tray', file }).info('second');
    assert.deepEqual(
      readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { msg: string }).msg),
      ['first', 'second'],
    );
    createLogger({ name: 'tray', file, maxFileBytes: 10 }).info('third');
    assert.deepEqual(readFileSync(`${file}.1`, 'utf8').trim().split('\n').length, 2);
    assert.deepEqual(
      readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { msg: string }).msg),
      ['third'],
    );
  });
});
