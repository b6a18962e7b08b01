import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CommandBody } from '../../src/shared/protocol.js';
import { fakeNode, model, setup, tick } from '../helpers/scheduler-doubles.js';

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
});
