import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ErrorCode, RelayError, httpError } from '../../src/shared/errors.js';
import { pickPlacement, wantsAnother, type RouteView } from '../../src/main/core/scheduler/decide/routing.js';
import { failedOn, newAttempts } from '../../src/main/core/scheduler/scheduler.js';

/**
 * The scheduler's rules — routing, scale-out, the wait queue, failover, failure memory, evictions, the hub's
 * own pause — with a launcher of the test's own: each start waits until the test lets it succeed or fail, so
 * every interleaving a user can hit is played out exactly. (The e2e tests run the same rules on llama.cpp.)
 */
import { fakeNode, model, rejected, setup, tick, where } from '../helpers/scheduler-doubles.js';
import { until } from '../helpers/proc.js';

describe('routing (pure)', () => {
  const v = (id: string, node: string | null, inFlight: number, msPerToken: number | null = null, slots = 2): RouteView => ({ id, node, state: 'ready', slots, inFlight, msPerToken });
  it('most free slots first; ties: the hub, then the lowest recent time-per-token; saturated and excluded never', () => {
    assert.equal(pickPlacement([v('a', 'n1', 1), v('b', 'n2', 0)])!.id, 'b');
    assert.equal(pickPlacement([v('a', 'n1', 0), v('h', null, 0)])!.id, 'h');
    assert.equal(pickPlacement([v('a', 'n1', 0, 30), v('b', 'n2', 0, 12)])!.id, 'b');
    assert.equal(pickPlacement([v('a', 'n1', 0, 30), v('b', 'n2', 0, null)])!.id, 'b', 'an unmeasured placement gets tried');
    assert.equal(pickPlacement([v('a', 'n1', 2), v('h', null, 2)]), null);
    assert.equal(pickPlacement([v('a', 'n1', 0)], new Set(['a'])), null);
    assert.equal(pickPlacement([{ ...v('s', null, 0), state: 'starting' }]), null);
  });
  it('another placement only while more wait than the free and coming slots, within the bound', () => {
    assert.equal(wantsAnother([], 1, 0), true);
    assert.equal(wantsAnother([{ ...v('s', null, 0, null, 1), state: 'starting' }], 1, 0), false);
    assert.equal(wantsAnother([{ ...v('s', null, 0, null, 1), state: 'starting' }], 2, 0), true);
    assert.equal(wantsAnother([v('a', 'n1', 1, null, 2)], 1, 0), false);
    assert.equal(wantsAnother([v('a', 'n1', 2, null, 2)], 1, 1), false, 'RELAY_MAX_PLACEMENTS_PER_MODEL=1');
  });
});

describe('scheduler with a manual launcher', () => {
  const m = model('m', 300);

  it('three concurrent requests on a 1-slot model: three placements, hub first, then the nodes', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const n1 = fakeNode('n1', probe + 10);
    const n2 = fakeNode('n2', probe + 20);
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes: [n1, n2], models: [m] });
    const leases = [scheduler.acquire('m'), scheduler.acquire('m'), scheduler.acquire('m')];
    for (let i = 0; i < 3; i++) (await launcher.nth(i)).ok();
    const got = await Promise.all(leases);
    assert.deepEqual(got.map((l) => where(l, launcher)).sort(), ['hub', 'n1', 'n2']);
    assert.equal(launcher.starts[0]!.p.kind, 'host');
    assert.deepEqual(
      scheduler.view.status().map((r) => r.in_flight),
      [1, 1, 1],
    );
    // A fourth waits for the first slot anywhere: no room for a fourth placement.
    const fourth = scheduler.acquire('m');
    await tick();
    assert.deepEqual(scheduler.view.queues(), [{ model: 'm', waiting: 1 }]);
    got[1]!.release({ tokensPerSecond: 20 });
    const l4 = await fourth;
    assert.equal(l4.placementId, got[1]!.placementId);
    got[1]!.release(); // a second release changes nothing
    assert.deepEqual(
      scheduler.view
        .status()
        .map((r) => r.in_flight)
        .sort(),
      [1, 1, 1],
    );
  });

  it('a waiting request takes whichever comes first: a freed slot, before the new placement is ready', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes: [fakeNode('n1', probe + 10)], models: [m] });
    const first = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    const l1 = await first;
    const second = scheduler.acquire('m');
    const loading = await launcher.nth(1); // a node replica is loading for it
    assert.equal(loading.p.node?.name, 'n1');
    l1.release();
    assert.equal((await second).placementId, l1.placementId, 'the freed slot won');
    loading.ok();
  });

  it('RELAY_MAX_PLACEMENTS_PER_MODEL bounds the placements; a full queue is 429 pool_busy with Retry-After; the timeout is 503 pool_busy', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({
      hubMb: probe + 5,
      nodes: [fakeNode('n1', probe + 10)],
      models: [m],
      env: { RELAY_MAX_PLACEMENTS_PER_MODEL: '1', RELAY_QUEUE_MAX: '1', RELAY_QUEUE_TIMEOUT_MS: '50' },
    });
    const l1 = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    await l1;
    const waiting = scheduler.acquire('m');
    const full = await rejected(scheduler.acquire('m'));
    assert.equal(full.code, ErrorCode.POOL_BUSY);
    const http = httpError(full);
    assert.deepEqual([http.status, http.body.error.code], [429, 'pool_busy']);
    assert.equal(full.details.retry_after_s, 5);
    const timedOut = await rejected(waiting);
    assert.deepEqual([timedOut.code, httpError(timedOut).status], [ErrorCode.POOL_BUSY, 503]);
    assert.equal(launcher.starts.length, 1, 'no second placement beyond the bound');
  });

  it('a load that fails moves the request to another machine and keeps the failed one off the model for a while', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const n1 = fakeNode('n1', probe + 50);
    n1.cache.set(m.sha256, m.size); // n1 holds the file: it is chosen first
    const n2 = fakeNode('n2', probe + 10);
    const { scheduler, launcher } = setup({ nodes: [n1, n2], models: [m] });
    const req = scheduler.acquire('m');
    (await launcher.nth(0)).fail();
    const retry = await launcher.nth(1);
    assert.equal(retry.p.node?.name, 'n2');
    retry.ok();
    assert.equal(where(await req, launcher), 'n2');
    assert.deepEqual(
      scheduler.view.backoffs().map((b) => [b.node, b.model, b.failures]),
      [['n1', 'm', 1]],
    );
    assert.match(scheduler.view.backoffs()[0]!.reason, /^load failed: /);
  });

  it('a shard whose stage fails on a node keeps that node (not the hub) off the model; the re-plan uses another', async () => {
    const need = setup({ models: [m] }).scheduler.need(m).needMb;
    const half = Math.floor(need) - 50; // each stage carries its own overhead: alone no, half of the layers yes
    const { scheduler, launcher } = setup({ hubMb: half, nodes: [fakeNode('n1', half), fakeNode('n2', half)], models: [m] });
    const req = scheduler.acquire('m');
    const first = await launcher.nth(0);
    assert.equal(first.p.kind, 'shard', 'no machine holds m alone');
    const remote = first.p.shardPlan!.stages.find((st) => st.node !== null)!.node!;
    first.fail(ErrorCode.REPLICA_FAILED, { node: remote });
    const second = await launcher.nth(1);
    assert.equal(second.p.kind, 'shard');
    const members = second.p.shardPlan!.stages.map((st) => st.node ?? 'hub');
    assert.ok(!members.includes(remote), `the re-plan avoids ${remote}: ${members.join(', ')}`);
    second.ok();
    await req;
    assert.deepEqual(
      scheduler.view.backoffs().map((b) => [b.node, b.model]),
      [[remote, 'm']],
    );
  });

  it('three failed attempts answer the last error; a paused node or a lost link is no failure of the node', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const nodes = ['a', 'b', 'c', 'd'].map((n) => fakeNode(n, probe + 10));
    const { scheduler, launcher } = setup({ nodes, models: [m] });
    const attempts = newAttempts();
    const req = scheduler.acquire('m', attempts);
    const lost = await launcher.nth(0);
    (lost.p.node as unknown as { alive: boolean }).alive = false; // its link dropped
    lost.fail(ErrorCode.NODE_LOST);
    (await launcher.nth(1)).fail();
    (await launcher.nth(2)).fail();
    const err = await rejected(req);
    assert.equal(err.code, ErrorCode.REPLICA_FAILED);
    assert.equal(attempts.errors.length, 3);
    assert.equal(launcher.starts.length, 3, 'not a fourth try');
    assert.deepEqual(
      scheduler.view
        .backoffs()
        .map((b) => b.node)
        .sort(),
      ['b', 'c'],
    );
  });

  it('a failure before the first byte excludes that placement for the request: it goes to another or a fresh one', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes: [fakeNode('n1', probe + 10)], models: [m] });
    const attempts = newAttempts();
    const first = scheduler.acquire('m', attempts);
    (await launcher.nth(0)).ok();
    const l1 = await first;
    failedOn(attempts, l1.placementId, new RelayError(ErrorCode.UPSTREAM_ERROR, 'reset'));
    l1.release();
    const again = scheduler.acquire('m', attempts);
    const fresh = await launcher.nth(1);
    assert.equal(fresh.p.node?.name, 'n1', 'a fresh placement, not the excluded one');
    fresh.ok();
    assert.notEqual((await again).placementId, l1.placementId);
  });

  it('a 503 costs nobody their model: too big stops nothing; fits-once-evicted evicts the idle one only', async () => {
    const a = model('a', 300);
    const b = model('b', 400);
    const huge = model('huge', 5000);
    const probe = setup({ models: [a] }).scheduler;
    const budget = Math.ceil(Math.max(probe.need(a).needMb, probe.need(b).needMb) + 50);
    const { scheduler, launcher } = setup({ hubMb: budget, models: [a, b, huge] });
    const la = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    const leaseA = await la;
    const tooBig = await rejected(scheduler.acquire('huge'));
    assert.equal(tooBig.code, ErrorCode.MODEL_UNAVAILABLE);
    assert.equal(tooBig.details.retry_after_s, undefined);
    // b fits once a is gone, but a is busy: pool_busy, a keeps running.
    const busy = await rejected(scheduler.acquire('b'));
    assert.equal(busy.code, ErrorCode.POOL_BUSY);
    assert.deepEqual(launcher.stopped, []);
    leaseA.release();
    const lb = scheduler.acquire('b');
    (await launcher.nth(1)).ok();
    assert.equal((await lb).model.name, 'b');
    assert.deepEqual(launcher.stopped, [leaseA.placementId]);
  });

  it("a stop's kept slots count for the router only once the hub holds them; a stop under an answer says so (its record)", async () => {
    const { scheduler, launcher } = setup({ hubMb: 2000, models: [model('a', 300)] });
    const router = (scheduler as unknown as { router: { parked: Map<string, string> } }).router; // its state, read
    const first = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    const lease = await first;
    let hold!: (kept: boolean) => void;
    launcher.keptLater = new Promise((r) => (hold = r));
    const stopping = scheduler.stopModel('a', 'the test stops it'); // with the answer still in flight
    await reaches(() => launcher.stopped.length, 1);
    lease.release();
    await stopping;
    assert.equal(launcher.saved.get(lease.placementId), true, 'stopped under an answer: its slots are saved (their record)');
    assert.equal(router.parked.get('a'), undefined, 'not parked while its slots are still on their way');
    hold(true);
    await reaches(() => router.parked.size, 1);
    assert.equal(router.parked.get('a'), lease.placementId);
  });

  it('a replica stopped between two turns (a pause) has its slots saved too; one whose keep-alive parked them, or the hub closing, not again', async () => {
    const { scheduler, launcher } = setup({ hubMb: 2000, models: [model('a', 300), model('b', 300)] });
    const first = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    const a = await first;
    a.release();
    await scheduler.hubPaused('the owner paused it');
    assert.equal(launcher.saved.get(a.placementId), true, 'an idle stop keeps its conversations for the next replica');
    const { scheduler: s2, launcher: l2 } = setup({ hubMb: 2000, models: [model('a', 300)], config: { keepAliveMs: 20 } });
    const second = s2.acquire('a');
    (await l2.nth(0)).ok();
    const b = await second;
    b.release();
    await reaches(() => l2.keeps.length, 1);
    l2.keeps[0]!.settle(true);
    await reaches(() => l2.stopped.length, 1);
    assert.equal(l2.saved.get(b.placementId), false, 'parked by its keep-alive: saved once, not twice');
    const third = s2.acquire('a');
    (await l2.nth(1)).ok();
    (await third).release();
    await s2.close();
    assert.equal(l2.saved.get(l2.starts[1]!.p.id), false, 'the hub shutting down saves nothing');
  });

  /** Model a's replica served once and idle past its 20 ms keep-alive: its slots' save has begun (and waits). */
  async function idleAndSaving() {
    const { scheduler, launcher } = setup({ hubMb: 2000, models: [model('a', 300)], config: { keepAliveMs: 20 } });
    const first = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    const lease = await first;
    lease.release();
    await reaches(() => launcher.keeps.length, 1);
    return { scheduler, launcher, lease };
  }
  const reaches = (count: () => number, n: number) => until(count, (x) => x === n, 5000, 5);

  it('the keep-alive runs out: the slots are saved while the replica stays ready; a request meanwhile is served at once and the save dropped', async () => {
    const { scheduler, launcher, lease } = await idleAndSaving();
    // While the slots are being written, a request: the replica answers it (no new start, no waiting for the save).
    const during = await scheduler.acquire('a');
    assert.equal(during.placementId, lease.placementId);
    launcher.keeps[0]!.settle(true);
    await reaches(() => launcher.discarded.length, 1);
    assert.deepEqual([launcher.discarded, launcher.stopped, launcher.starts.length], [[lease.placementId], [], 1], 'the stale save dropped, the replica kept');
    // Idle again: saved again, and this time it stops.
    during.release();
    await reaches(() => launcher.keeps.length, 2);
    launcher.keeps[1]!.settle(true);
    await reaches(() => launcher.stopped.length, 1);
    assert.deepEqual(launcher.discarded, [lease.placementId], 'the second save is kept');
  });

  it('a keep-alive that runs out again while the last save is still writing waits for it: saves of one replica never overlap', async () => {
    const { scheduler, launcher, lease } = await idleAndSaving();
    (await scheduler.acquire('a')).release(); // served during the save, and idle again at once
    await new Promise((r) => setTimeout(r, 200)); // ten keep-alives pass while the first save still writes
    assert.equal(launcher.keeps.length, 1, 'no second save begins beside the first');
    launcher.keeps[0]!.settle(true);
    await reaches(() => launcher.keeps.length, 2);
    assert.deepEqual(launcher.discarded, [lease.placementId], 'the stale save dropped first');
    launcher.keeps[1]!.settle(true);
    await reaches(() => launcher.stopped.length, 1);
    assert.deepEqual(launcher.stopped, [lease.placementId]);
  });

  it('a client that leaves while its model is re-hashed leaves no waiter behind to take a slot for no one', async () => {
    const a = model('a', 300);
    let rehashed!: () => void;
    let hold = true;
    const { scheduler, launcher } = setup({ hubMb: 2000, models: [a], verify: () => (hold ? new Promise<void>((r) => (rehashed = r)) : Promise.resolve()) });
    const leaving = new AbortController();
    const gone = scheduler.acquire('a', undefined, leaving.signal);
    await tick();
    leaving.abort(); // during the re-hash: its abort event has fired before any waiter exists
    hold = false;
    rehashed();
    const err = await rejected(gone);
    assert.equal(err.code, ErrorCode.INVALID_REQUEST);
    assert.equal(scheduler.view.status().length + launcher.starts.length, 0, 'nothing was placed for it');
    const next = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    assert.equal((await next).model.name, 'a', 'the next request is served');
  });

  it('extra placements never evict another model: a saturated model waits instead', async () => {
    const a = model('a', 300);
    const b = model('b', 300);
    const probe = setup({ models: [a] }).scheduler.need(a).needMb;
    const { scheduler, launcher } = setup({ hubMb: Math.ceil(probe * 2 + 10), models: [a, b] });
    const la = scheduler.acquire('a');
    (await launcher.nth(0)).ok();
    (await la).release();
    const lb = scheduler.acquire('b');
    (await launcher.nth(1)).ok();
    const leaseB = await lb;
    const second = scheduler.acquire('b'); // b is saturated; a second b would need a's room
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(launcher.starts.length, 2);
    assert.deepEqual(launcher.stopped, []);
    leaseB.release();
    assert.equal((await second).placementId, leaseB.placementId);
  });

  it('a background request never evicts a model people use: it waits (no 503), and is served once a person’s request makes the room', async () => {
    const a = model('a', 300);
    const b = model('b', 300);
    const probe = setup({ models: [a] }).scheduler.need(a).needMb;
    const { scheduler, launcher } = setup({ hubMb: Math.ceil(probe * 1.5), models: [a, b] });
    const person = { key: null, priority: 'interactive', canYield: false } as const;
    const agent = { key: 'agent', priority: 'background', canYield: true } as const;
    const la = scheduler.acquire('a', undefined, undefined, null, person);
    (await launcher.nth(0)).ok();
    (await la).release(); // idle, but a person used it within its keep-alive
    const background = scheduler.acquire('b', undefined, undefined, null, agent);
    let settled = false;
    void background.then(
      () => (settled = true),
      () => (settled = true),
    );
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(settled, false, 'the background request waits: neither answered nor refused');
    assert.deepEqual(launcher.stopped, [], "the person's model stays");
    assert.equal(launcher.starts.length, 1);
    // A person asks for b: that may evict a; the waiting background request shares the new placement.
    const lb = scheduler.acquire('b', undefined, undefined, null, person);
    (await launcher.nth(1)).ok();
    const first = await Promise.race([lb, background]);
    assert.equal(first, await lb, 'the person is served first');
    assert.deepEqual(launcher.stopped, [launcher.starts[0]!.p.id]);
    first.release();
    assert.equal((await background).model.name, 'b');
  });

  const agent = (key: string) => ({ key, priority: 'background', canYield: true }) as const;

  /** Two agents' answers hold both slots of `a` (x's begun first), then a person asks; `record` holds a yield's record. */
  async function personAfterTwoAgents(record?: () => Promise<void>) {
    const { scheduler, launcher } = setup({ hubMb: 4000, models: [model('a', 300)], env: { RELAY_PARALLEL_SLOTS: '2' }, config: { maxPlacementsPerModel: 1 } });
    if (record) launcher.recordSlots = record;
    const l1 = scheduler.acquire('a', undefined, undefined, null, agent('x'));
    (await launcher.nth(0)).ok();
    const older = await l1;
    await new Promise((r) => setTimeout(r, 5));
    const newer = await scheduler.acquire('a', undefined, undefined, null, agent('y'));
    const person = scheduler.acquire('a', undefined, undefined, null, { key: 'voice', priority: 'interactive', canYield: false });
    await tick();
    return { scheduler, launcher, older, newer, person };
  }

  it('a person waits on a model whose slots background answers hold: the newest yields, and the person takes its slot', async () => {
    const { scheduler, launcher, older, newer, person } = await personAfterTwoAgents();
    assert.equal(newer.halted.aborted, true, 'the answer begun last is asked to yield');
    assert.equal(older.halted.aborted, false);
    newer.release();
    const p = await person;
    assert.equal(p.placementId, newer.placementId);
    assert.equal(launcher.starts.length, 1, 'no new placement was started for the person: the yield was its slot');
    // The yielded answer, back in the queue, waits its turn behind nobody else: it gets the next slot free.
    const back = scheduler.acquire('a', undefined, undefined, null, agent('y'));
    p.release();
    assert.equal((await back).placementId, p.placementId);
  });

  it('while a yielded slot is held for its record, no second answer yields for the same person', { timeout: 10_000 }, async () => {
    let recorded!: () => void;
    const { scheduler, older, newer, person } = await personAfterTwoAgents(() => new Promise<void>((r) => (recorded = r)));
    assert.equal(newer.halted.aborted, true);
    newer.release(); // its slot is now held while its tokens are read
    // The yielded answer queues again (a pump): the held slot is already the person's, so nothing else yields.
    const back = scheduler.acquire('a', undefined, undefined, null, agent('y'));
    await tick();
    assert.equal(older.halted.aborted, false, 'the older answer runs on');
    recorded();
    const p = await person;
    assert.equal(p.placementId, newer.placementId);
    p.release();
    older.release();
    (await back).release();
  });

  it("a placement that crashes while requests wait re-plans them; the hub's own pause sends new placements to nodes", async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    let paused = false;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes: [fakeNode('n1', probe + 10)], models: [m], hubPaused: () => paused });
    const l = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    (await l).release();
    paused = true;
    await scheduler.hubPaused('paused by the owner');
    assert.deepEqual(launcher.stopped, [launcher.starts[0]!.p.id]);
    const next = scheduler.acquire('m');
    const onNode = await launcher.nth(1);
    assert.equal(onNode.p.node?.name, 'n1');
    onNode.ok();
    const ln = await next;
    // A crash of a ready placement fails its future; a waiting request goes to a fresh placement.
    const waiting = scheduler.acquire('m');
    onNode.crash();
    paused = false;
    const fresh = await launcher.nth(2);
    assert.equal(fresh.p.kind, 'host');
    fresh.ok();
    assert.equal((await waiting).placementId, fresh.p.id);
    ln.release();
  });

  it('a node GPU whose last reading predates a ready replica still counts that replica: no second one on top', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const gpu = fakeNode('g', 0, { devices: [{ id: 'CUDA0', kind: 'gpu', description: 'a GPU', totalMb: 24_000, freeMb: probe * 1.5, ageMs: 0 }], devicesAt: Date.now() - 60_000 });
    const { scheduler, launcher } = setup({ nodes: [gpu], models: [m] });
    const first = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    await first;
    const second = scheduler.acquire('m');
    await tick();
    assert.equal(launcher.starts.length, 1, "the reading (a minute old) does not show the first replica's memory yet");
    await scheduler.close();
    await rejected(second);
  });

  it('a request withdrawn while waiting leaves the queue', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, models: [m] });
    const first = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    await first;
    const ac = new AbortController();
    const waiting = scheduler.acquire('m', newAttempts(), ac.signal);
    await tick();
    assert.deepEqual(scheduler.view.queues(), [{ model: 'm', waiting: 1 }]);
    ac.abort();
    await rejected(waiting);
    assert.deepEqual(scheduler.view.queues(), []);
  });
});
