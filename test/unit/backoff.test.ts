import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FailureMemory } from '../../src/main/core/scheduler/decide/backoff.js';

describe('failure memory (pure)', () => {
  it('skips a (node, model) for 30 s, doubling to 10 min, per pair, and forgets on success', () => {
    let t = 0;
    const f = new FailureMemory(() => t);
    assert.equal(f.blocked('north', 'm'), null);
    assert.equal(f.failed('north', 'm', 'load failed').until, 30_000);
    assert.ok(f.blocked('north', 'm'));
    assert.equal(f.blocked('north', 'other'), null);
    assert.equal(f.blocked('south', 'm'), null);
    t = 30_000;
    assert.equal(f.blocked('north', 'm'), null); // expired: tried again
    assert.equal(f.failed('north', 'm', 'crashed').until - t, 60_000);
    for (let i = 0; i < 8; i++) f.failed('north', 'm', 'again');
    const last = f.failed('north', 'm', 'again');
    assert.equal(last.until - last.at, 600_000);
    assert.deepEqual(
      f.active().map((b) => [b.node, b.model, b.reason]),
      [['north', 'm', 'again']],
    );
    f.succeeded('north', 'm');
    assert.equal(f.blocked('north', 'm'), null);
    assert.equal(f.failed('north', 'm', 'fresh start').until - t, 30_000);
  });
});
