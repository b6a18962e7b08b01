import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chooseYields, servingOrder, type Priority, type RunningView } from '../../src/main/core/scheduler/decide/turns.js';

/** Whose turn it is (scheduler/decide/turns.ts), as tables: the order a model's waiters are served in, and who yields. */
const w = (key: string | null, priority: Priority, since: number) => ({ who: { key, priority }, since, name: `${key ?? '-'}@${since}` });
const names = (ws: { name: string }[]): string[] => ws.map((x) => x.name);

describe('whose turn it is', () => {
  it('interactive before background, whatever came first', () => {
    assert.deepEqual(names(servingOrder([w('agent', 'background', 1), w('voice', 'interactive', 5), w(null, 'interactive', 9)], new Map())), ['voice@5', '-@9', 'agent@1']);
  });

  it('among equals, keys take turns: twenty of one key do not hold back one of another', () => {
    const waiting = [...Array.from({ length: 20 }, (_, i) => w('agent', 'background', i)), w('batch', 'background', 25)];
    const order = names(servingOrder(waiting, new Map()));
    assert.deepEqual(order.slice(0, 3), ['agent@0', 'batch@25', 'agent@1'], 'the second key gets the second turn');
    assert.equal(order.length, 21);
  });

  it('the key served longest ago goes first (never served first); a key’s own requests oldest first', () => {
    const waiting = [w('a', 'background', 1), w('a', 'background', 2), w('b', 'background', 3), w('c', 'background', 4)];
    const turns = new Map<string | null, number>([
      ['a', 10],
      ['b', 3],
    ]);
    assert.deepEqual(names(servingOrder(waiting, turns)), ['c@4', 'b@3', 'a@1', 'a@2']);
  });

  const r = (id: string, priority: Priority, since: number, o: Partial<RunningView> = {}): RunningView => ({ id, placementId: 'p', priority, canYield: true, yielding: false, since, ...o });

  it('a background answer yields for each interactive request waiting beyond the slots on their way: the newest first', () => {
    const running = [r('old', 'background', 1), r('new', 'background', 9), r('person', 'interactive', 5)];
    assert.deepEqual(
      chooseYields(running, 1, 0).map((x) => x.id),
      ['new'],
    );
    assert.deepEqual(
      chooseYields(running, 2, 0).map((x) => x.id),
      ['new', 'old'],
    );
    assert.deepEqual(chooseYields(running, 1, 1), [], 'a free slot: nobody yields');
    assert.deepEqual(chooseYields([r('a', 'background', 1, { yielding: true }), r('b', 'background', 2)], 1, 0), [], 'a yield under way serves the waiter');
    assert.deepEqual(chooseYields([r('a', 'background', 1, { canYield: false })], 1, 0), [], 'an answer that cannot go on elsewhere runs to its end');
    assert.deepEqual(chooseYields([r('p', 'interactive', 1)], 1, 0), [], 'a person never yields');
  });
});
