import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { History, samples } from '../../src/main/core/hub/state/history.js';

describe("chart history (the hub keeps the dashboard's last minutes)", () => {
  it('keeps each series for the window, skips missing values, drops a series no longer sampled', () => {
    const h = new History(60_000);
    h.record(
      [
        ['tps:r1', 20],
        ['mem:hub:CPU', 300],
        ['tps:r2', null],
      ],
      0,
    );
    h.record(
      [
        ['tps:r1', 25],
        ['mem:hub:CPU', 310],
      ],
      30_000,
    );
    h.record([['mem:hub:CPU', 320]], 70_000);
    assert.deepEqual(h.snapshot().series, {
      'tps:r1': [[30_000, 25]],
      'mem:hub:CPU': [
        [30_000, 310],
        [70_000, 320],
      ],
    });
    h.record([['mem:hub:CPU', 330]], 100_000);
    assert.deepEqual(Object.keys(h.snapshot().series), ['mem:hub:CPU'], 'r1 ended a window ago');
  });

  it('names samples as the dashboard names its charts: tok/s from ms per token, memory used per device', () => {
    const s = samples({
      placements: () => [
        { id: 'p1', ms_per_token: 4 },
        { id: 'p2', ms_per_token: null },
      ],
      hubDevices: () => [{ id: 'CPU', total_mb: 800, free_mb: 300 }],
      nodeDevices: () => [{ node: 'north', id: 'CUDA0', totalMb: 24_000, freeMb: 4000 }],
    });
    assert.deepEqual(s, [
      ['tps:p1', 250],
      ['tps:p2', null],
      ['mem:hub:CPU', 500],
      ['mem:north:CUDA0', 20_000],
    ]);
  });
});
