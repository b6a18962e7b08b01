import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chooseEvictions, freeAfterReservations, type Reservation } from '../../src/main/core/scheduler/decide/plan.js';

/** Pure eviction planning: a request that cannot be placed stops nobody; one that can stops only what it needs. */
const idle = (id: string, lastUsedAt: number) => ({ id, lastUsedAt });

describe('chooseEvictions', () => {
  it('stops nothing when even stopping every idle placement would not make room', () => {
    let asked = 0;
    assert.equal(
      chooseEvictions([idle('a', 1), idle('b', 2)], () => (asked++, false)),
      null,
    );
    assert.equal(asked, 3); // {} , {a}, {a,b}
  });

  it('takes least recently used first, and only as many as the plan needs', () => {
    const fits = (ev: ReadonlySet<string>) => ev.size >= 2;
    assert.deepEqual(
      chooseEvictions([idle('new', 9), idle('old', 1), idle('mid', 5)], fits)!.map((r) => r.id),
      ['old', 'mid'],
    );
  });

  it('keeps an older placement whose room was not the one that mattered (it sat on another machine)', () => {
    // Only b's room helps (say, b is on the node that fits): a is older but stays.
    const fits = (ev: ReadonlySet<string>) => ev.has('b');
    assert.deepEqual(
      chooseEvictions([idle('a', 1), idle('b', 2), idle('c', 3)], fits)!.map((r) => r.id),
      ['b'],
    );
  });
});

describe('freeAfterReservations with planned evictions', () => {
  const view = (over: Partial<Reservation>): Reservation => ({ id: 'r', model: 'm', device: 'D', needMb: 1000, state: 'ready', inFlight: 0, lastUsedAt: 0, readyAt: 10, ...over });
  it("a CPU budget gets an evicted placement's reservation back", () => {
    const cpu = [{ id: 'D', kind: 'cpu' as const, totalMb: 3000, reportedFreeMb: 3000 }];
    assert.equal(freeAfterReservations(cpu, [view({}), view({ id: 's', needMb: 500 })])[0]!.freeMb, 1500);
    assert.equal(freeAfterReservations(cpu, [view({ evict: true }), view({ id: 's', needMb: 500 })])[0]!.freeMb, 2500);
  });
  it('a GPU whose reading counts the placement gets its room back; one that does not yet, is just not charged', () => {
    const gpu = [{ id: 'D', kind: 'gpu' as const, totalMb: 8000, reportedFreeMb: 4000, readAt: 100 }];
    assert.equal(freeAfterReservations(gpu, [view({ evict: true })])[0]!.freeMb, 5000);
    assert.equal(freeAfterReservations(gpu, [view({ evict: true, readyAt: 200 })])[0]!.freeMb, 4000);
    assert.equal(freeAfterReservations(gpu, [view({ readyAt: 200 })])[0]!.freeMb, 3000);
  });
});
