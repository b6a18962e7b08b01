import type { Logger } from 'pino';
import type { HubConfig } from '../../config.js';
import type { NodeConn, NodeManager } from '../../pool/manager.js';
import { STOP_REPLICA_WAIT_MS } from '../../timeouts.js';
import type { Launcher } from '../launch/launcher.js';
import { machinesOf, type Placement } from '../placements/placement.js';
import { HUB } from './placer.js';

/**
 * How the scheduler's table is kept true to what really runs: the stall probe (a request through a placement has
 * heard nothing for a while) and the reconciliation of each node's reports. Both only find things out; what a
 * finding does — fail the placement, back its machine off, re-plan its waiters — is the scheduler's `fail`.
 */
export interface WatchDeps {
  readonly config: HubConfig;
  readonly launcher: Launcher;
  readonly nodes?: NodeManager;
  readonly log: Logger;
  readonly placements: () => Iterable<Placement>;
  readonly get: (id: string) => Placement | undefined;
  /** Fail `p` (gone from the table at once), keep `backoff`'s machine off its model if given, stop what it ran if `kill`. */
  readonly fail: (p: Placement, why: string, opts: { tail?: string; backoff?: { machine: string; reason: string }; kill: boolean }) => void;
}

export class PlacementWatch {
  /** Probes under way, by placement: the requests that stall on one placement share one look at it. */
  private readonly probing = new Map<string, Promise<void>>();
  /** Nodes being reconciled now, and whether another report came meanwhile. */
  private readonly reconciling = new WeakMap<NodeConn, { again: boolean; done: Promise<void> }>();

  constructor(private readonly deps: WatchDeps) {}

  /**
   * A request through `p` has heard nothing for a while: are the machines it runs on there, and do its processes
   * answer? Each node is pinged (2 s; a node that does not answer is lost at once: nodeLost fails everything on it,
   * streams end, waiting requests fail over). Then the processes: stopped fails the placement now, a /health that
   * does not answer twice in a row too (one that exited is failed by its exit's own path). A placement that only computes (a long prompt) is left alone.
   */
  probe(p: Placement): Promise<void> {
    let running = this.probing.get(p.id);
    if (!running) {
      running = this.probeOnce(p)
        .catch((err: unknown) => this.deps.log.warn({ placement: p.id, err: String(err) }, 'probe failed'))
        .finally(() => this.probing.delete(p.id));
      this.probing.set(p.id, running);
    }
    return running;
  }

  private async probeOnce(p: Placement): Promise<void> {
    if (p.state !== 'ready') return;
    const conns = machinesOf(p)
      .filter((n): n is string => n !== null)
      .map((n) => this.deps.nodes?.get(n))
      .filter((c): c is NodeConn => c !== undefined);
    const answered = await Promise.all(conns.map((c) => c.probe(`a request to ${p.model} heard nothing from it`)));
    if (!answered.every(Boolean) || p.state !== 'ready') return; // lost: nodeLost has failed what ran there
    if (!this.deps.config.hangCheck) return;
    const verdict = await this.deps.launcher.check(p);
    if (p.state !== 'ready') return;
    if (verdict === 'ok') {
      p.unresponsive = 0;
      return;
    }
    // Gone: its exit is reported on its own path (the hub reaps a local child, a node's heartbeat says so), with
    // the exit status in the message.
    if (verdict === 'gone') return;
    if (verdict === 'unresponsive' && ++p.unresponsive < 2) return;
    const what = p.kind === 'shard' ? 'a process of the shard' : 'its llama-server';
    const why = verdict === 'stopped' ? `${what} is stopped (SIGSTOP?)` : `${what} does not answer /health`;
    // Killed: its streams end, requests waiting on it fail over. A replica's machine is kept off the model a while
    // (a shard's check does not say whose process hung).
    this.deps.fail(p, why, { tail: p.running?.tail() ?? '', kill: true, ...(p.kind !== 'shard' ? { backoff: { machine: p.node?.name ?? HUB, reason: `hung: ${why}` } } : {}) });
  }

  /**
   * After a hello or a heartbeat: a replica the node no longer runs has failed; a replica or rpc-server the hub
   * does not expect is stopped. One reconciliation per node at a time (its stop commands may wait on the node for
   * seconds while heartbeats keep coming): a report that arrives meanwhile is reconciled once, when it ends.
   */
  reconcile(conn: NodeConn): Promise<void> {
    const r = this.reconciling.get(conn);
    if (r) {
      r.again = true;
      return r.done;
    }
    const entry = { again: false, done: Promise.resolve() };
    entry.done = (async () => {
      try {
        do {
          entry.again = false;
          await this.reconcileOnce(conn);
        } while (entry.again && conn.alive);
      } finally {
        this.reconciling.delete(conn);
      }
    })();
    this.reconciling.set(conn, entry);
    return entry.done;
  }

  private async reconcileOnce(conn: NodeConn): Promise<void> {
    const reported = new Set(conn.replicas.map((x) => x.replica));
    for (const p of [...this.deps.placements()]) {
      if (p.node === conn && p.state === 'ready' && !reported.has(p.id)) {
        this.deps.fail(p, `the replica exited on node ${conn.name}`, { backoff: { machine: conn.name, reason: 'the replica exited (crashed)' }, kill: false });
      }
    }
    for (const x of conn.replicas) {
      const ours = this.deps.get(x.replica);
      if (!ours || ours.node?.name !== conn.name) {
        this.deps.log.info({ node: conn.name, replica: x.replica }, 'node runs a replica the hub does not expect: stopping it');
        await conn.command({ type: 'stop-replica', replica: x.replica }, STOP_REPLICA_WAIT_MS).catch(() => undefined);
      }
    }
    // rpc-servers too: a shard torn down while the node was away, or one from before a hub restart, holds a
    // device and an unauthenticated listener for nothing.
    for (const r of conn.rpcs) {
      if (this.deps.launcher.expectsRpc(conn.name, r.rpc)) continue;
      this.deps.log.info({ node: conn.name, rpc: r.rpc }, 'node runs an rpc-server the hub does not expect: stopping it');
      await conn.command({ type: 'stop-rpc', rpc: r.rpc }, STOP_REPLICA_WAIT_MS).catch(() => undefined);
    }
  }
}
