import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  bandwidthMsPerGib,
  BANDWIDTH_SHARE,
  DEFAULT_LINK,
  DEFAULT_MS_PER_GIB,
  hiddenBytes,
  hopMs,
  layerMs,
  observeDevice,
  REPLAN_THRESHOLD,
  stageTimes,
  wantsReplan,
} from '../../src/main/core/scheduler/decide/speed.js';
import { SpeedBook } from '../../src/main/core/scheduler/run/speeds.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';
import type { Stage } from '../../src/main/core/scheduler/decide/shard.js';

// 8 layers of 128 MiB: 1 GiB of layer weights.
const m = { name: 'm', blockCount: 8, weightsMb: 1024 };
const record = { name: 'm', block_count: 8, required_vram_mb: 1024, size: 0 } as unknown as ModelRecord;

describe('device speeds and links (pure)', () => {
  it('a measured answer sets ms per layer for the model and ms per GiB across models; later ones decay into it', () => {
    const a = observeDevice(undefined, m, 8, 40, 1)!;
    assert.equal(a.perLayer.m, 5);
    assert.equal(a.msPerGib, 40);
    const b = observeDevice(a, m, 8, 80, 2)!;
    assert.equal(b.perLayer.m, 5 * 0.7 + 10 * 0.3);
    assert.equal(b.samples, 2);
    assert.equal(observeDevice(b, m, 8, NaN, 3), b, 'no timing: nothing changes');
    assert.equal(observeDevice(b, m, 0, 10, 3), b);
  });

  it('a prediction comes from the model measured there, else the device across models, else the default for its kind', () => {
    const d = observeDevice(undefined, m, 8, 40, 1)!;
    assert.deepEqual(layerMs(d, { kind: 'gpu' }, m), { ms: 5, source: 'model' });
    assert.deepEqual(layerMs(d, { kind: 'gpu' }, { name: 'other', blockCount: 4, weightsMb: 2048 }), { ms: 20, source: 'device' });
    assert.deepEqual(layerMs(undefined, { kind: 'gpu' }, m), { ms: DEFAULT_MS_PER_GIB.gpu / 8, source: 'default' });
    assert.ok(layerMs(undefined, { kind: 'cpu' }, m).ms > layerMs(undefined, { kind: 'gpu' }, m).ms);
  });

  it('a device never measured whose bandwidth the driver gives: predicted from it, slower memory slower in proportion', () => {
    const fast = layerMs(undefined, { kind: 'gpu', memGBps: 504 }, m);
    const slow = layerMs(undefined, { kind: 'gpu', memGBps: 192 }, m);
    assert.deepEqual(fast, { ms: bandwidthMsPerGib(504) / 8, source: 'bandwidth' });
    // 1 GiB read at 75% of 504 GB/s: 1.0737 GB / 378 GB/s ≈ 2.84 ms.
    assert.ok(Math.abs(bandwidthMsPerGib(504) - 1073.741824 / (504 * BANDWIDTH_SHARE)) < 1e-9);
    assert.ok(Math.abs(slow.ms / fast.ms - 504 / 192) < 1e-9);
    // What the device measured wins; a bandwidth that is not a positive number is the kind's default.
    const d = observeDevice(undefined, m, 8, 40, 1)!;
    assert.deepEqual(layerMs(d, { kind: 'gpu', memGBps: 504 }, m), { ms: 5, source: 'model' });
    for (const bad of [0, -5, NaN, null, undefined]) assert.equal(layerMs(undefined, { kind: 'gpu', memGBps: bad }, m).source, 'default');
    const book = new SpeedBook();
    assert.deepEqual(book.status('hub', 'CUDA0', { kind: 'gpu', memGBps: 504.048 }), {
      ms_per_gib: Math.round(bandwidthMsPerGib(504.048) * 1000) / 1000,
      source: 'bandwidth',
      mem_gbps: 504,
      samples: 0,
      per_layer_ms: {},
      measured_at: null,
    });
  });

  it("a remote stage's hop: the link's round trip plus the hidden state there and back at its rate", () => {
    assert.equal(hiddenBytes(1024), 4096);
    assert.equal(hopMs({ rttMs: 3, bytesPerMs: 4096 }, 4096), 5);
    assert.equal(hopMs(undefined, 4096), DEFAULT_LINK.rttMs + 8192 / DEFAULT_LINK.bytesPerMs);
    assert.equal(hopMs({ rttMs: 3, bytesPerMs: null }, 0), 3);
  });

  it("a shard's time splits into stages: each remote its wait less the round trip, the hub what is left", () => {
    assert.deepEqual(
      stageTimes(30, [
        { waitMs: 10, rttMs: 2 },
        { waitMs: 5, rttMs: 1 },
      ]),
      { hubMs: 15, remoteMs: [8, 4] },
    );
    assert.equal(stageTimes(30, [{ waitMs: null, rttMs: 2 }]), null, 'a stage not yet waited on');
    assert.equal(stageTimes(10, [{ waitMs: 12, rttMs: 2 }]), null, 'waits longer than the whole: not split');
    // A round trip measured longer than the wait (a ping behind a queue): the stage keeps a floor, never below zero.
    assert.ok(stageTimes(30, [{ waitMs: 10, rttMs: 20 }])!.remoteMs[0]! > 0);
  });

  it('a model removed: its per-layer figure goes from every device, the devices’ own figures stay', () => {
    const book = new SpeedBook();
    book.replica('north', 'CPU', record, 16);
    book.replica('south', 'CPU', { ...record, name: 'other' }, 8);
    let changes = 0;
    book.onChange = () => changes++;
    book.forgetModel('m');
    assert.deepEqual([book.status('north', 'CPU', { kind: 'cpu' }).per_layer_ms, book.status('north', 'CPU', { kind: 'cpu' }).ms_per_gib, changes], [{}, 16, 1]);
    assert.equal(book.layerMs('north', 'CPU', { kind: 'cpu' }, record)!.source, 'device', 'predicted from the device across models');
    assert.deepEqual(book.status('south', 'CPU', { kind: 'cpu' }).per_layer_ms, { other: 1 });
    book.forgetModel('m');
    assert.equal(changes, 1, 'nothing left to forget: no write');
  });

  it('a re-plan is wanted only past the threshold either way', () => {
    assert.equal(wantsReplan(10, 10 * (1 + REPLAN_THRESHOLD) - 0.01), false);
    assert.equal(wantsReplan(10, 10 * (1 + REPLAN_THRESHOLD) + 0.01), true);
    assert.equal(wantsReplan(10, 10 * (1 - REPLAN_THRESHOLD) - 0.01), true);
    assert.equal(wantsReplan(null, 10), false);
    assert.equal(wantsReplan(10, null), false);
  });

  it('the speed book: a replica measures its device; a shard each of its stages on its own machine', () => {
    const book = new SpeedBook(() => Date.parse('2026-12-06T12:00:00Z'));
    assert.equal(book.status('hub', 'CPU', { kind: 'cpu' }).source, 'default');
    book.replica('north', 'CPU', record, 16);
    assert.equal(book.layerMs('north', 'CPU', { kind: 'cpu' }, record)!.ms, 2);
    const stages: Stage[] = [
      { node: 'north', device: 'CPU', kind: 'cpu', layers: [0, 4], needMb: 1, freeMb: 1, output: false },
      { node: 'south', device: 'CPU', kind: 'cpu', layers: [4, 6], needMb: 1, freeMb: 1, output: false },
      { node: null, device: 'CPU', kind: 'cpu', layers: [6, 8], needMb: 1, freeMb: 1, output: true },
    ];
    const shares = book.shard(stages, 'hub', record, 30, [
      { waitMs: 9, rttMs: 1 },
      { waitMs: 11, rttMs: 1 },
    ]);
    assert.deepEqual(shares, [8, 10, 10]);
    assert.equal(book.layerMs('south', 'CPU', { kind: 'cpu' }, record)!.ms, 5);
    assert.equal(book.layerMs('hub', 'CPU', { kind: 'cpu' }, record)!.ms, 5);
    assert.equal(book.layerMs('north', 'CPU', { kind: 'cpu' }, record)!.ms, 2 * 0.7 + 2 * 0.3);
    // Not split: a MoE model (its remote stages are waited on once per layer), or waits that do not match the stages.
    assert.equal(
      book.shard(stages, 'hub', { ...record, expert_count: 8, expert_used_count: 2 }, 30, [
        { waitMs: 9, rttMs: 1 },
        { waitMs: 11, rttMs: 1 },
      ]),
      null,
    );
    assert.equal(book.shard(stages, 'hub', record, 30, []), null);
    const st = book.status('south', 'CPU', { kind: 'cpu' });
    assert.deepEqual([st.source, st.samples, st.per_layer_ms, st.measured_at], ['measured', 1, { m: 5 }, '2026-12-06T12:00:00.000Z']);
  });
});
