import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { rates } from '../../src/main/core/hub/state/history.js';
import { HubMetrics } from '../../src/main/core/hub/state/metrics.js';
import { poolPicture } from '../../src/main/core/hub/observe/picture.js';
import { whyNotLine } from '../../src/main/core/scheduler/decide/why-not.js';
import type { NodeStatus, ReplicaStatus, ShardStatus, StageStatus } from '../../src/shared/status.js';
import { fakeNode, model, rejected, setup } from '../helpers/scheduler-doubles.js';

/**
 * The dashboard's picture of the pool (hub/observe/picture.ts), its "why not" line (scheduler/decide/why-not.ts and the
 * placer's what-ifs behind it) and the charts' rates (hub/state/history.ts). The e2e test draws them in chromium.
 */
const placement = {
  state: 'ready',
  port: null,
  pid: null,
  ctx: 512,
  slots: 2,
  in_flight: 1,
  served: 3,
  kv_cache_type: 'f16',
  prompt_ms_per_token: null,
  prefix_hits: 0,
  spec: null,
  spec_why: 'set to none',
  draft_tokens: null,
  failure: null,
} as const;
const replica = (id: string, node: string | null, device: string, needMb: number, extra: Partial<ReplicaStatus> = {}): ReplicaStatus => ({
  ...placement,
  id,
  model: `m-${id}`,
  sha256: 'x',
  where: node ? 'node' : 'host',
  node,
  device,
  flash_attn: 'auto',
  need_mb: needMb,
  started_at: '',
  last_used_at: '',
  buffers: [],
  ms_per_token: 20,
  load: null,
  ...extra,
});
const stage = (index: number, node: string | null, layers: [number, number], output: boolean): StageStatus => ({
  index,
  node,
  device: 'CPU',
  layers,
  need_mb: 100,
  free_mb: 0,
  output,
  rpc_endpoint: null,
  rpc_bytes: null,
  rpc_round_trips: null,
  predicted_ms: null,
  measured_ms: null,
});
const node = (name: string, state: NodeStatus['state'], extra: Partial<NodeStatus> = {}): NodeStatus => ({
  name,
  state,
  reason: null,
  schedule: null,
  connected: state !== 'offline',
  devices: [{ id: 'CPU', kind: 'cpu', description: 'cpu', total_mb: 1000, free_mb: 300, age_ms: 0 }],
  cache: [],
  replicas: [],
  rpcs: [],
  last_seen: null,
  created_at: '',
  revoked_at: null,
  bytes: null,
  link: null,
  relay_version: null,
  refused: null,
  ...extra,
});

describe('the pool picture (pure)', () => {
  const shard = {
    ...placement,
    id: 's1',
    model: 'big',
    ms_per_token: null,
    load: { since: '', elapsed_ms: 5000, deadline_ms: 60_000 },
    stages: [stage(1, 'north', [2, 4], false), stage(0, null, [0, 2], true)],
    warnings: [],
    buffers: [],
  } as unknown as ShardStatus;
  const parts = {
    hub: { availability: 'idle' as const, reason: null, paused: false, schedule: '', auto_pause: false },
    devices: [{ id: 'CPU', kind: 'cpu' as const, description: 'budget', total_mb: 800, free_mb: 100, utilization_pct: null, source: 'cpu-budget', bus_id: null }],
    nodes: [node('north', 'idle'), node('south', 'paused', { reason: 'paused by the owner' }), node('east', 'offline'), node('gone', 'revoked')],
    replicas: [replica('r1', null, 'CPU', 500), replica('r2', 'north', 'CPU', 400)],
    shards: [shard],
    backoffs: [{ node: 'south', model: 'm-r1', failures: 2, reason: 'load failed', since: '', until: '2026-12-02T10:00:00.000Z' }],
    pushes: [{ node: 'north', model: 'big', sha256: 'y', done: 10, total: 40, started_at: '' }],
  };
  const pic = poolPicture(parts);

  it('the hub first, then every node not revoked; an offline node has no devices', () => {
    assert.deepEqual(
      pic.map((m) => [m.name, m.role, m.state, m.devices.length]),
      [
        ['hub', 'hub', 'idle', 1],
        ['north', 'node', 'idle', 1],
        ['south', 'node', 'paused', 1],
        ['east', 'node', 'offline', 0],
      ],
    );
    assert.equal(pic[2]!.reason, 'paused by the owner');
  });

  it("each device: its placements (a shard's stage numbered in execution order), other programs' use and free room add up", () => {
    const hub = pic[0]!.devices[0]!;
    assert.deepEqual(
      hub.segments.map((s) => [s.placement, s.kind, s.mb, s.stage?.index ?? null, s.stage?.output ?? null]),
      [
        ['r1', 'replica', 500, null, null],
        ['s1', 'stage', 100, 1, true],
      ],
    );
    assert.equal(hub.other_mb, 800 - 100 - 600, 'used minus what relay reserved');
    const north = pic[1]!.devices[0]!;
    assert.deepEqual(
      north.segments.map((s) => [s.placement, s.stage ? `${s.stage.index}/${s.stage.of}` : null]),
      [
        ['r2', null],
        ['s1', '2/2'],
      ],
    );
    assert.equal(north.other_mb, 700 - 500);
    assert.equal(north.segments[0]!.tokens_per_second, 50, '1000 / 20 ms per token');
    assert.deepEqual(north.segments[1]!.load, shard.load, 'a loading shard carries its deadline');
    // A reservation larger than the reading (not yet seen by the GPU's counter) never draws negative use.
    const over = poolPicture({ ...parts, devices: [{ ...parts.devices[0]!, free_mb: 700 }] });
    assert.equal(over[0]!.devices[0]!.other_mb, 0);
  });

  it("each device's measured speed and each node's link ride along; the hub has no link", () => {
    const speed = { ms_per_gib: 52.5, source: 'measured' as const, samples: 3, per_layer_ms: { big: 1.2 }, measured_at: '2026-12-06T10:00:00.000Z' };
    const link = { rtt_ms: 4.2, bytes_per_s: 1_250_000 };
    const north = node('north', 'idle', { link, devices: [{ id: 'CPU', kind: 'cpu', description: 'cpu', total_mb: 1000, free_mb: 300, age_ms: 0, speed }] });
    const pic = poolPicture({ ...parts, devices: [{ ...parts.devices[0]!, speed }], nodes: [north] });
    assert.equal(pic[0]!.link, null);
    assert.deepEqual(pic[0]!.devices[0]!.speed, speed);
    assert.deepEqual(pic[1]!.link, link);
    assert.deepEqual(pic[1]!.devices[0]!.speed, speed);
    assert.equal(poolPicture(parts)[0]!.devices[0]!.speed, null, 'a status without speeds: none drawn');
  });

  it('backoffs and pushes are marked on the machine they concern', () => {
    assert.deepEqual(pic[2]!.backoffs, [{ model: 'm-r1', reason: 'load failed', until: '2026-12-02T10:00:00.000Z' }]);
    assert.deepEqual(pic[1]!.pushes, [{ model: 'big', done: 10, total: 40 }]);
    assert.deepEqual([pic[0]!.backoffs, pic[0]!.pushes], [[], []]);
  });
});

describe('why not, in one line', () => {
  const base = { needMb: 900, largest: { machine: 'north', device: 'CPU', freeMb: 400 }, resumeOne: [], resumeAll: false, backedOff: [], onceIdle: false };
  it('need vs the largest free room, then the first thing that would make room', () => {
    assert.equal(whyNotLine(base), 'needs 900 MB; largest free room 400 MB (north CPU); no machine of this pool can hold it (a smaller quantization, context or slot count would need less)');
    assert.equal(
      whyNotLine({ ...base, resumeOne: [{ machine: 'south', reason: 'paused by the owner' }], onceIdle: true }),
      'needs 900 MB; largest free room 400 MB (north CPU); resuming south (paused by the owner) would make room',
    );
    assert.equal(whyNotLine({ ...base, resumeAll: true }), 'needs 900 MB; largest free room 400 MB (north CPU); resuming the paused machines together would make room');
    assert.equal(
      whyNotLine({ ...base, backedOff: [{ machine: 'hub', until: Date.parse('2026-12-02T10:05:00Z') }] }),
      'needs 900 MB; largest free room 400 MB (north CPU); hub is kept off it after a failure until 10:05 UTC',
    );
    assert.equal(whyNotLine({ ...base, largest: null, onceIdle: true }), 'needs 900 MB; no machine takes work now; it fits once the placements running now finish');
  });

  it("the placer's facts: a paused node that would make room is named; the 503 carries the same line", async () => {
    const m = model('m', 300);
    const need = setup({ models: [m] }).scheduler.need(m).needMb;
    const south = fakeNode('south', need + 100, { availability: 'paused', reason: 'outside the sharing schedule' });
    const { scheduler } = setup({ nodes: [fakeNode('north', need - 50), south], models: [model('other', 10), m] });
    const line = scheduler.availability(m).whyNot;
    assert.equal(line, `needs ${Math.ceil(need)} MB; largest free room ${Math.ceil(need - 50)} MB (north CPU); resuming south (outside the sharing schedule) would make room`);
    const err = await rejected(scheduler.acquire('m'));
    assert.equal(err.details.why_not, line);
  });

  it('a model that fits when placed is not explained', () => {
    const m = model('m', 300);
    const { scheduler } = setup({ hubMb: 10_000, models: [m] });
    assert.deepEqual(scheduler.availability(m), { available: true, reason: null, whyNot: null });
  });
});

describe("the charts' rates", () => {
  it('tokens per second by model, requests per minute and the error share between two readings of the totals', () => {
    const m = new HubMetrics();
    const t0 = m.totals();
    m.requests.add({ endpoint: 'chat', status: '200' });
    m.requests.add({ endpoint: 'chat', status: '200' });
    m.requests.add({ endpoint: 'completions', status: '200' });
    m.requests.add({ endpoint: 'chat', status: '503' });
    m.tokens.add({ model: 'a', kind: 'completion' }, 50);
    m.tokens.add({ model: 'a', kind: 'prompt' }, 999);
    m.tokens.add({ model: 'b', kind: 'completion' }, 10);
    const t1 = m.totals();
    assert.deepEqual(t1, { requests: 4, errors: 1, completion: { a: 50, b: 10 } });
    assert.deepEqual(rates(t0, t1, 5000), [
      ['gen:a', 10],
      ['gen:b', 2],
      ['req', 48],
      ['err', 25],
    ]);
    assert.deepEqual(rates(t1, t1, 5000), [
      ['gen:a', 0],
      ['gen:b', 0],
      ['req', 0],
      ['err', 0],
    ]);
    assert.deepEqual(rates(t1, t1, 0), []);
  });
});
