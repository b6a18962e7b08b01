import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CommandBody } from '../../src/shared/protocol.js';
import { fakeNode, model, rejected, setup, tick } from '../helpers/scheduler-doubles.js';
import { loadDeadlineMs } from '../../src/main/core/scheduler/decide/deadline.js';
import { stallMs } from '../../src/main/core/scheduler/decide/routing.js';
import { HUB_DEFAULTS } from '../../src/main/core/config.js';
import { newAttempts, STRANDED_GRACE_MS, strandedNow, type Waiter } from '../../src/main/core/scheduler/placements/queue.js';
import { ErrorCode, RelayError } from '../../src/shared/errors.js';

/**
 * The scheduler when the home network and the machines misbehave: reports that pile up while a node is slow to
 * answer, nodes lost while requests wait, placements stopped while they load. (A manual launcher, as in
 * scheduler.test.ts: every interleaving is played out exactly; the chaos suite runs the same on real processes.)
 */
describe('scheduler under faults', () => {
  const m = model('m', 300);

  it('one reconciliation per node at a time: reports that come while a stop waits on the node are reconciled once after it', async () => {
    const commands: CommandBody[] = [];
    const answers: (() => void)[] = [];
    const n1 = fakeNode('n1', 1000, {
      replicas: [{ replica: 'stray', sha256: 'f'.repeat(64), pid: 4242 }],
      command: (c: CommandBody) => {
        commands.push(c);
        return new Promise((r) => answers.push(() => r({ type: 'reply', id: 0, ok: true })));
      },
    });
    const { scheduler } = setup({ nodes: [n1], models: [m] });
    const runs = Array.from({ length: 10 }, () => scheduler.reconcile(n1)); // ten heartbeats while the node is slow
    await tick();
    assert.deepEqual(
      commands.map((c) => c.type),
      ['stop-replica'],
      'one stop in flight, not ten',
    );
    answers.shift()!();
    await tick();
    assert.equal(commands.length, 2, 'the reports that came meanwhile: reconciled once more');
    answers.shift()!();
    await Promise.all(runs);
    assert.equal(commands.length, 2);
  });

  it("losing nodes fails only the waiters nothing else can serve: the hub's busy replica still serves the one waiting", async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const nodes = ['n1', 'n2', 'n3', 'n4'].map((n) => fakeNode(n, probe + 10));
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes, models: [m] });
    const first = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    const onHub = await first; // the hub's replica, busy with its one slot
    const waiting = scheduler.acquire('m');
    // Four node placements are tried for the waiter, one after the other; each node goes away while it loads.
    for (let i = 1; i <= 4; i++) {
      const start = await launcher.nth(i);
      const conn = start.p.node!;
      (conn as unknown as { alive: boolean }).alive = false;
      scheduler.nodeLost(conn, 'disconnected (the Wi-Fi dropped)');
    }
    await tick();
    assert.deepEqual(scheduler.view.queues(), [{ model: 'm', waiting: 1 }], 'still waiting: four lost nodes are not its failures');
    onHub.release();
    assert.equal((await waiting).placementId, onHub.placementId, "served by the hub's replica once it was free");
  });

  it('a placement stopped while it loads keeps its room until its process has exited: no second copy on top of it', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, models: [m] });
    const first = scheduler.acquire('m');
    const loading = await launcher.nth(0); // loading on the hub's only room
    launcher.holdStops = true;
    const stopping = scheduler.stopModel('m', 'settings changed'); // the launcher is killing the loading process
    await tick();
    const again = scheduler.acquire('m'); // the client retries at once
    await tick();
    assert.equal(launcher.starts.length, 1, 'no second llama-server planned while the first still holds the device');
    assert.deepEqual(
      scheduler.view.status().map((r) => r.state),
      ['stopping'],
    );
    launcher.holdStops = false;
    launcher.releaseStops(); // the process exited
    await stopping;
    const next = await launcher.nth(1);
    loading.fail(); // the killed load's own error arrives late: it changes nothing
    next.ok();
    const l1 = await first; // both requests are served by the new placement, in their order
    assert.equal(l1.placementId, next.p.id);
    l1.release();
    assert.equal((await again).placementId, next.p.id);
    assert.equal(launcher.starts.length, 2);
  });

  it("a load's deadline: the base plus a term per GiB of weights (the defaults: 5 min for 4 GB, 32 min for 40 GB)", () => {
    const GIB = 1024 ** 3;
    const s = { loadBaseMs: 2000, loadMsPerGib: 10_000 };
    assert.equal(loadDeadlineMs(0, s), 2000);
    assert.equal(loadDeadlineMs(GIB, s), 12_000);
    assert.equal(loadDeadlineMs(GIB / 2, s), 7000);
    assert.equal(Math.round(loadDeadlineMs(4 * GIB, HUB_DEFAULTS) / 60_000), 5);
    assert.equal(Math.round(loadDeadlineMs(40e9, HUB_DEFAULTS) / 60_000), 30);
  });

  it('a request waits as long as a placement of its model is still starting, then its queue time counts again', async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const { scheduler, launcher } = setup({ hubMb: probe + 5, models: [m], env: { RELAY_QUEUE_TIMEOUT_MS: '20' } });
    const first = scheduler.acquire('m');
    const loading = await launcher.nth(0); // a long load
    await new Promise((r) => setTimeout(r, 150)); // several queue timeouts pass while it loads
    assert.deepEqual(scheduler.view.queues(), [{ model: 'm', waiting: 1 }], 'still waiting for the load');
    loading.ok();
    const l = await first;
    const second = scheduler.acquire('m'); // the one slot is taken, nothing is starting: 20 ms, then pool_busy
    const err = await rejected(second);
    assert.equal(err.code, 'POOL_BUSY');
    l.release();
  });

  it("a stalled request's probe: a stopped llama-server fails its placement at once, one that does not answer /health on the second look; one computing is left alone", async () => {
    const probe = setup({ models: [m] }).scheduler.need(m).needMb;
    const n1 = fakeNode('n1', probe + 10);
    const { scheduler, launcher } = setup({ hubMb: probe + 5, nodes: [n1], models: [m] });
    const a = scheduler.acquire('m');
    (await launcher.nth(0)).ok();
    const onHub = await a;
    assert.equal(onHub.stallMs(), 2500, 'no speed known yet: the most');
    await onHub.probe(); // all well: nothing changes
    assert.deepEqual(
      scheduler.view.status().map((r) => r.state),
      ['ready'],
    );
    launcher.liveness.set(onHub.placementId, 'unresponsive');
    await onHub.probe();
    assert.deepEqual(
      scheduler.view.status().map((r) => r.state),
      ['ready'],
      'one /health without an answer is not enough',
    );
    launcher.liveness.set(onHub.placementId, 'ok');
    await onHub.probe(); // it answered again: the count starts over
    launcher.liveness.set(onHub.placementId, 'unresponsive');
    await onHub.probe();
    assert.equal(scheduler.view.status()[0]!.state, 'ready');
    await onHub.probe();
    const failed = scheduler.view.status()[0]!;
    assert.equal(failed.state, 'failed');
    assert.match(failed.failure!.message, /does not answer \/health/);
    assert.ok(launcher.stopped.includes(onHub.placementId), 'its process is killed: the stream through it ends');
    assert.deepEqual(
      scheduler.view.backoffs().map((b) => [b.node, b.model]),
      [['hub', 'm']],
    );
    onHub.release();
    // The next request goes to the node; a stopped llama-server there fails at the first look.
    const b = scheduler.acquire('m');
    const onNode = await launcher.nth(1);
    assert.equal(onNode.p.node?.name, 'n1');
    onNode.ok();
    const l = await b;
    launcher.liveness.set(l.placementId, 'stopped');
    await l.probe();
    assert.match(scheduler.view.status().find((r) => r.id === l.placementId)!.failure!.message, /is stopped/);
    l.release();
  });

  it("the stall limit follows the placement's speed: ten token times, within 1 to 2.5 s", () => {
    assert.deepEqual(
      [null, 20, 150, 400].map((ms) => stallMs(ms)),
      [2500, 1000, 1500, 2500],
    );
  });

  it('reconciliation stops rpc-servers the hub does not expect (a shard torn down while the node was away), keeps the others', async () => {
    const commands: CommandBody[] = [];
    const n1 = fakeNode('n1', 1000, {
      rpcs: [
        { rpc: 'gone-0', pid: 11 },
        { rpc: 'live-0', pid: 12 },
      ],
      command: (c: CommandBody) => {
        commands.push(c);
        return Promise.resolve({ type: 'reply', id: 0, ok: true });
      },
    });
    const { scheduler, launcher } = setup({ nodes: [n1], models: [m] });
    launcher.rpcs.add('n1/live-0');
    await scheduler.reconcile(n1);
    assert.deepEqual(commands, [{ type: 'stop-rpc', rpc: 'gone-0' }]);
  });
});

describe('a request a placement just failed, when nothing else can serve it', () => {
  const waiter = (errors: number): Waiter => ({ attempts: { ...newAttempts(), errors: Array.from({ length: errors }, () => new RelayError(ErrorCode.UPSTREAM_ERROR, 'reset')) } }) as unknown as Waiter;

  it('waits once (the placement may be a crashed process the hub has not reaped), then is answered; one no placement failed is answered at once', async () => {
    const failed = waiter(1);
    const never = waiter(0);
    let again = 0;
    assert.deepEqual(
      strandedNow([failed, never], () => again++),
      [never],
      'the failed one waits; the other is answered now',
    );
    assert.equal(again, 0);
    await new Promise((r) => setTimeout(r, STRANDED_GRACE_MS + 50));
    assert.equal(again, 1, 'the queue is looked at again after the grace');
    assert.deepEqual(
      strandedNow([failed], () => again++),
      [failed],
      'still nothing for it: answered now, no second grace',
    );
    await new Promise((r) => setTimeout(r, STRANDED_GRACE_MS + 50));
    assert.equal(again, 1);
  });
});
