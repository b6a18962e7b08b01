import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { promptPrefix } from '../../src/main/core/hub/proxy/prompt-prefix.js';
import type { Placement } from '../../src/main/core/scheduler/placements/placement.js';
import { PrefixIndex } from '../../src/main/core/scheduler/decide/prefix.js';
import { Router } from '../../src/main/core/scheduler/placements/router.js';
import { routeRequest, type RouteView } from '../../src/main/core/scheduler/decide/routing.js';
import { fakeNode, model, setup, tick, where } from '../helpers/scheduler-doubles.js';

/**
 * Prefix-aware routing: a conversation's turns go back to the placement whose KV cache holds its start. The keys
 * (hub/proxy/prompt-prefix.ts), the memory of them (scheduler/decide/prefix.ts), the rule (routing.ts's routeRequest) and the
 * scheduler acting on it. (test/e2e/conversations.test.ts runs it on llama-server and reads `cached_tokens`.)
 */

const SYSTEM = 'You are a careful assistant. '.repeat(20);
const turn = (n: number, who = 'a'): Record<string, unknown> => {
  const messages: unknown[] = [{ role: 'system', content: SYSTEM }];
  for (let i = 0; i < n; i++) messages.push({ role: 'user', content: `${who} question ${i}` }, { role: 'assistant', content: `${who} answer ${i}` });
  messages.push({ role: 'user', content: `${who} question ${n}` });
  return { model: 'm', messages, max_tokens: 8 };
};

describe('prompt prefix keys', () => {
  it("a conversation's next turn shares every key of the turn before, and a different conversation only the shared system prompt", () => {
    const t1 = promptPrefix(turn(1))!;
    const t2 = promptPrefix(turn(2))!;
    assert.equal(t1.keys.length, 4);
    assert.deepEqual(t2.keys.slice(0, 4), t1.keys);
    assert.ok(t2.chars[3]! === t1.chars[3]! && t2.chars.at(-1)! > t1.chars.at(-1)!);
    const other = promptPrefix(turn(1, 'b'))!;
    assert.equal(other.keys[0], t1.keys[0], 'the same system prompt');
    assert.notEqual(other.keys[1], t1.keys[1]);
  });

  it("Anthropic's moving cache_control marks change no key; system and tools come first, whatever the body's key order", () => {
    const msgs = (marked: number) =>
      [0, 1, 2].map((i) => ({ role: i % 2 ? 'assistant' : 'user', content: [{ type: 'text', text: `m${i}`, ...(i === marked ? { cache_control: { type: 'ephemeral' } } : {}) }] }));
    const a = promptPrefix({ messages: msgs(1), system: 'sys', tools: [{ name: 't' }] })!;
    const b = promptPrefix({ system: 'sys', tools: [{ name: 't' }], messages: msgs(2) })!;
    assert.deepEqual(a.keys, b.keys);
    assert.notEqual(promptPrefix({ messages: msgs(1), system: 'other' })!.keys[0], a.keys[0]);
  });

  it('a plain prompt in blocks of 1 KiB (completions, the Responses API with a string); nothing to route by → null', () => {
    const long = 'x'.repeat(2500);
    const p = promptPrefix({ prompt: long })!;
    assert.deepEqual(p.chars, [1024, 2048, 2500]);
    assert.deepEqual(promptPrefix({ prompt: `${long}more` })!.keys.slice(0, 2), p.keys.slice(0, 2));
    assert.deepEqual(promptPrefix({ input: long })!.keys, p.keys);
    assert.equal(promptPrefix({ input: [1, 2, 3] })?.keys.length, 3, 'Responses input items, one key each');
    assert.equal(promptPrefix({ model: 'm' }), null);
    assert.equal(promptPrefix({ prompt: [1, 2, 3] }), null, 'a prompt of token ids: least loaded');
  });
});

describe('the prefix index', () => {
  it('the longest held prefix; a placement forgotten holds nothing; the least recently used keys go first', () => {
    const ix = new PrefixIndex(6);
    const t1 = promptPrefix(turn(1))!;
    const t2 = promptPrefix(turn(2))!;
    ix.record('p1', t1);
    assert.equal(ix.matched('p1', t2), t1.chars.at(-1));
    assert.equal(ix.matched('p2', t2), 0);
    // b's turn: 3 new keys and the shared system prompt's refreshed, 7 > 6: a's longest prefix goes, its shorter ones stay.
    ix.record('p1', promptPrefix(turn(1, 'b'))!);
    assert.equal(ix.size('p1'), 6);
    assert.equal(ix.matched('p1', t2), t1.chars[2]);
    ix.forget('p1');
    assert.equal(ix.matched('p1', t2), 0);
  });

  it("kept slots: a parked placement's prefixes move to the replica that restored them; one parked per model", () => {
    const router = new Router({ enabled: true, now: () => 0, repump: () => undefined });
    const t1 = promptPrefix(turn(1))!;
    const t2 = promptPrefix(turn(2))!;
    const placement = (id: string) => ({ id, node: null, state: 'ready', fit: { slots: 1 }, inFlight: 0, msPerToken: null, promptMsPerToken: null, prefixHits: 0 }) as unknown as Placement;
    router.leased(placement('old'), t1, false);
    router.park('m', 'old');
    router.adopt('m', 'old', 'new');
    assert.equal(router.views([placement('new')], t2)[0]!.matched, t1.chars.at(-1));
    assert.equal(router.views([placement('old')], t2)[0]!.matched, 0);
    // A second park of the same model forgets the first one's keys (nothing restored them).
    router.leased(placement('a'), t1, false);
    router.park('m', 'a');
    router.park('m', 'b');
    router.adopt('m', 'a', 'c');
    assert.equal(router.views([placement('c')], t2)[0]!.matched, 0);
  });
});

describe('the routing rule', () => {
  const v = (id: string, inFlight: number, matched: number, promptMsPerToken: number | null = null, slots = 1): RouteView => ({
    id,
    node: id === 'h' ? null : id,
    state: 'ready',
    slots,
    inFlight,
    msPerToken: null,
    promptMsPerToken,
    matched,
  });
  const none = new Set<string>();

  it('the placement holding the longest prefix wins over a less loaded one; nobody holding any: least loaded', () => {
    assert.equal(routeRequest([v('h', 0, 0, null, 4), v('a', 1, 4000, null, 2)], none, 0).pick!.id, 'a');
    assert.equal(routeRequest([v('a', 0, 100), v('b', 0, 4000)], none, 0).pick!.id, 'b');
    assert.equal(routeRequest([v('h', 0, 0), v('a', 0, 0)], none, 0).pick!.id, 'h');
  });

  it('saturated: wait for it only as long as evaluating the prefix elsewhere would take, then go', () => {
    // 4,000 chars ≈ 1,000 tokens at 2 ms each: 2 s of prompt to save.
    const busy = [v('a', 1, 4000, 2), v('b', 0, 0, 2)];
    assert.deepEqual(routeRequest(busy, none, 0), { pick: null, holdMs: 2000 });
    assert.deepEqual(routeRequest(busy, none, 1500), { pick: null, holdMs: 500 });
    assert.equal(routeRequest(busy, none, 2000).pick!.id, 'b');
    assert.equal(routeRequest([v('a', 1, 4000, null), v('b', 0, 0, null)], none, 0).pick!.id, 'b', 'prompt speed unknown: no wait worth betting on');
    assert.deepEqual(routeRequest([v('a', 1, 4000, 2), v('b', 0, 3900, 2)], none, 0), { pick: null, holdMs: 50 }, 'the free one holds nearly as much: 25 tokens are 50 ms');
    assert.deepEqual(routeRequest([v('a', 1, 4000, 2), v('b', 1, 0, 2)], none, 0), { pick: null, holdMs: 0 }, 'all busy: the first slot anywhere');
  });

  it('a placement that failed the request is not warm for it: failover as before', () => {
    assert.equal(routeRequest([v('a', 0, 4000, 2), v('b', 0, 0, 2)], new Set(['a']), 0).pick!.id, 'b');
    assert.equal(routeRequest([{ ...v('a', 0, 4000, 2), state: 'stopping' }, v('b', 0, 0, 2)], none, 0).pick!.id, 'b');
  });
});

describe('the scheduler routes by prefix', () => {
  const m = model('m', 300);
  /** Two ready 1-slot placements of m: on the hub and on n1. */
  /** `frozen`: the clock stands still, so a request that holds for its placement holds until a release. */
  async function twoPlacements(env: Record<string, string> = {}, frozen = true) {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const s = setup({ hubMb: probe + 5, nodes: [fakeNode('n1', probe + 10)], models: [m], env, ...(frozen ? { now: () => 1_000_000 } : {}) });
    const both = [s.scheduler.acquire('m'), s.scheduler.acquire('m')];
    for (let i = 0; i < 2; i++) (await s.launcher.nth(i)).ok();
    for (const l of await Promise.all(both)) l.release({ promptMs: 200, promptEvaluated: 100 }); // 2 ms per prompt token
    return s;
  }

  it("each conversation's turns go back to the placement that served its first turn, and /status counts the hits", async () => {
    const { scheduler, launcher } = await twoPlacements({}, false);
    const first = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(0, 'a')));
    // b's system prompt is a's: b waits for a's placement as long as evaluating it takes (150 tokens, 300 ms), then takes the other.
    const second = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(0, 'b')));
    const homeA = where(first, launcher);
    const homeB = where(second, launcher);
    assert.notEqual(homeA, homeB, 'two at once: one each');
    first.release();
    second.release();
    for (let n = 1; n < 4; n++) {
      for (const [who, home] of [
        ['b', homeB],
        ['a', homeA],
      ] as const) {
        const l = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(n, who)));
        assert.equal(where(l, launcher), home, `turn ${n} of ${who}`);
        l.release();
      }
    }
    assert.deepEqual(
      scheduler.view.status().map((r) => r.prefix_hits),
      [3, 3],
    );
  });

  it('its placement busy: the turn waits for it while that is cheaper than its prefix elsewhere', async () => {
    const { scheduler, launcher } = await twoPlacements();
    const a0 = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(0, 'a')));
    const home = where(a0, launcher);
    const busy = await scheduler.acquire('m'); // no prompt to route by: the free placement
    busy.release();
    // a's next turn while a0 still runs on its placement, the other one free: it waits for a0 to finish.
    const a1 = scheduler.acquire('m', undefined, undefined, promptPrefix(turn(1, 'a')));
    await tick();
    assert.deepEqual(scheduler.view.queues(), [{ model: 'm', waiting: 1 }]);
    a0.release();
    assert.equal(where(await a1, launcher), home);
  });

  it('a stopped placement is forgotten: the conversation starts cold elsewhere; RELAY_PREFIX_ROUTING=0: least loaded', async () => {
    const { scheduler, launcher } = await twoPlacements();
    const a0 = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(0, 'a')));
    const home = launcher.starts.find((x) => x.p.id === a0.placementId)!;
    a0.release();
    home.crash();
    await tick();
    const a1 = await scheduler.acquire('m', undefined, undefined, promptPrefix(turn(1, 'a')));
    assert.notEqual(a1.placementId, a0.placementId);
    assert.equal(scheduler.view.status().find((r) => r.id === a1.placementId)!.prefix_hits, 0);

    const off = await twoPlacements({ RELAY_PREFIX_ROUTING: '0' });
    const homes = new Set<string>();
    for (let n = 0; n < 3; n++) {
      const l = await off.scheduler.acquire('m', undefined, undefined, promptPrefix(turn(n, 'a')));
      homes.add(where(l, off.launcher));
      l.release();
    }
    assert.deepEqual([...homes], ['hub'], 'least loaded, ties to the hub: the prefix plays no part');
  });
});
