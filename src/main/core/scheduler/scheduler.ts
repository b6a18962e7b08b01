import type { Logger } from 'pino';
import { expireIdle } from './run/keep-alive.js';
import { ErrorCode, RelayError, isRelayError } from '../../../shared/errors.js';
export { failedOn, newAttempts, type Attempts } from './placements/queue.js';
import type { HubConfig } from '../config.js';
import type { Device } from '../gpu/inventory.js';
import type { NodeConn, NodeManager } from '../pool/manager.js';
import type { ModelRegistry } from '../models/registry.js';
import type { ModelRecord } from '../store/store.js';
import { blamedMachine, FailureMemory } from './decide/backoff.js';
import type { FitBreakdown } from './decide/fit.js';
import type { Launcher } from './launch/launcher.js';
import type { SlotTokens } from './slots/answer-records.js';
import { armIdle, failPlacement, isLive, machinesOf, newPlacement, openLease, type Lease, type NewPlacement, type Placement } from './placements/placement.js';
import { HUB, Placer } from './run/placer.js';
import { ANYONE, countStranding, newAttempts, strandedNow, WaitQueue, type Attempts, type Requester, type Waiter } from './placements/queue.js';
import { holdForRecord, mayEvictFor, slotsYielding, yieldFor } from './run/yields.js';
import { wantsAnother } from './decide/routing.js';
import { Router } from './placements/router.js';
import type { PromptPrefix } from './decide/prefix.js';
import { PoolView } from './run/view.js';
import { PlacementWatch } from './run/watch.js';
import { loadDeadlineMs } from './decide/deadline.js';
import { SpecTallies } from './run/spec-tally.js';
import { answered } from './run/speeds.js';

/**
 * The scheduler: for a request naming model M, lease a slot of a placement of M (router.ts), or queue it and add
 * placements while more wait than M's can take (planned by the Placer, made real by the Launcher); it waits for a
 * free slot or a new placement. Placements stop after the keep-alive, when their machine pauses or leaves, or to
 * make room for a model that has none.
 */

/** Attempts a request gets before the last error is its answer (loads that failed under it, failovers). */
export const MAX_ATTEMPTS = 3;

export interface SchedulerDeps {
  readonly config: HubConfig;
  readonly registry: ModelRegistry;
  readonly launcher: Launcher;
  readonly devices: () => Device[];
  readonly nodes?: NodeManager;
  readonly log: Logger;
  readonly hubPaused?: () => boolean; // the hub's own devices, now
  readonly onLoad?: (model: string, seconds: number) => void;
  readonly now?: () => number;
}

export class Scheduler {
  private readonly placements = new Map<string, Placement>();
  /** The last failed placement of each model stays visible in /status until a load of the model replaces it. */
  private readonly failed = new Map<string, Placement>();
  private readonly waiting: WaitQueue;
  private closed = false;
  /** The stall probe and the reconciliation of node reports (watch.ts). */
  private readonly watch: PlacementWatch;
  /** (machine, model) pairs whose placement failed to load or crashed: skipped for that model for a while. */
  private readonly failures: FailureMemory;
  readonly placer: Placer;
  /** Which placement takes a request: least loaded, or the one holding its prompt's prefix (router.ts). */
  private readonly router: Router;
  /** Reads of the table for /status, the dashboard, the tray and auto-pause (view.ts). */
  readonly view: PoolView;
  /** What each model's speculation drafted and had accepted: a type that does not pay is turned off (speculation.ts). */
  readonly specs = new SpecTallies();

  constructor(private readonly deps: SchedulerDeps) {
    this.failures = new FailureMemory(() => this.now());
    this.router = new Router({ enabled: deps.config.prefixRouting, now: () => this.now(), repump: (m) => this.pump(m) });
    this.waiting = new WaitQueue({
      max: deps.config.queueMax,
      timeoutMs: deps.config.queueTimeoutMs,
      starting: (name) => [...this.placements.values()].some((p) => p.model === name && p.state === 'starting'),
    });
    this.placer = new Placer({
      config: deps.config,
      devices: deps.devices,
      nodes: deps.nodes,
      failures: this.failures,
      log: deps.log,
      placements: () => this.placements.values(),
      failed: () => this.failed.values(),
      hubPaused: () => deps.hubPaused?.() ?? false,
    });
    this.watch = new PlacementWatch({
      config: deps.config,
      launcher: deps.launcher,
      nodes: deps.nodes,
      log: deps.log,
      placements: () => this.placements.values(),
      get: (id) => this.placements.get(id),
      fail: (p, why, o) => {
        this.markFailed(p, why, o.tail ?? '');
        if (o.backoff) this.noteFailure(o.backoff.machine, p.model, o.backoff.reason);
        if (o.kill) void this.deps.launcher.stop(p);
        this.pump(p.model);
      },
    });
    this.view = new PoolView({
      config: deps.config,
      registry: deps.registry,
      launcher: deps.launcher,
      devices: deps.devices,
      placements: this.placements,
      failed: this.failed,
      failures: this.failures,
      waiting: this.waiting,
      placer: this.placer,
    });
  }

  private readonly now = (): number => this.deps.now?.() ?? Date.now();
  need(model: ModelRecord): FitBreakdown {
    return this.placer.need(model);
  }

  private of(model: ModelRecord): Placement[] {
    return [...this.placements.values()].filter((p) => p.model === model.name && p.sha256 === model.sha256);
  }

  /** Whether the pool can serve the model now, and if not, why (for /v1/models and /status). */
  availability(model: ModelRecord): { available: boolean; reason: string | null; whyNot: string | null } {
    if (this.of(model).some(isLive) || this.placer.canPlaceNow(model)) return { available: true, reason: null, whyNot: null };
    return { available: false, reason: this.placer.shortfall(model), whyNot: this.placer.whyNot(model) };
  }

  /**
   * A slot of a ready placement of `name`, now or once one frees up or a new placement is ready, for `who`.
   * `attempts`: the request's earlier failures (MAX_ATTEMPTS); `signal` withdraws it; `prefix`: its prompt's keys.
   */
  async acquire(name: string, attempts: Attempts = newAttempts(), signal?: AbortSignal, prefix: PromptPrefix | null = null, who: Requester = ANYONE): Promise<Lease> {
    if (this.closed) throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, 'the hub is shutting down');
    const model = await this.current(name);
    // The client may have left while its model was re-hashed: no waiter for it (it would hold a slot for no one).
    if (signal?.aborted) throw new RelayError(ErrorCode.INVALID_REQUEST, 'the client went away while waiting');
    if (this.waiting.size(model.name) === 0) {
      const c = this.router.choose(model.name, this.of(model), attempts.exclude, prefix, this.now());
      if (c) return this.lease(c, model, prefix, who);
    }
    this.waiting.checkRoom(model.name, who.priority);
    const { lease } = this.waiting.add(model, attempts, signal, { prefix, since: this.now() }, who);
    this.pump(model.name);
    return lease;
  }

  /** The model as its file is now: a changed file re-hashed (once), its placements stopped only if the bytes differ. */
  private async current(name: string): Promise<ModelRecord> {
    const { model, changed } = await this.deps.registry.verify(name);
    if (changed) await this.stopModel(name, 'model file changed on disk');
    return model;
  }

  /**
   * Free slots to waiters (people first, keys by turns: decide/turns.ts), background answers yielding to people who
   * still wait, placements added while more wait than they can take (never evicting a model people use for a
   * background request), and the waiters answered when none can be made (a background one waits if it fits later).
   */
  private pump(name: string): void {
    const q = this.waiting.of(name);
    if (q.length === 0) return;
    // The record as it is now (its settings may have changed while these requests waited).
    const model = this.deps.registry.get(name) ?? q[0]!.model;
    for (const w of q) {
      const c = this.router.choose(name, this.of(model), w.attempts.exclude, w.prefix, w.since);
      if (c) w.resolve(this.lease(c, model, w.prefix, w.who));
    }
    const left = (): Waiter[] => this.waiting.of(name);
    yieldFor(this.of(model), left());
    // A waiter is stranded when every live placement of M already failed it (or M has none).
    const stranded = (): Waiter[] => left().filter((w) => !this.of(model).some((p) => isLive(p) && !w.attempts.exclude.has(p.id)));
    const max = this.deps.config.maxPlacementsPerModel;
    const below = (): boolean => max <= 0 || this.of(model).filter(isLive).length < max;
    while (left().length > 0 && ((stranded().length > 0 && below()) || wantsAnother(this.router.views(this.of(model)), left().length - slotsYielding(this.of(model)), max))) {
      const first = !this.of(model).some(isLive);
      const plan = this.placer.place(model, first, mayEvictFor(left(), this.now(), this.deps.config.keepAliveMs));
      if (!plan) break;
      this.start(model, plan);
    }
    // Room that a stopping placement is about to give back may be what M needs: wait for it (every stop re-pumps).
    const roomComing = [...this.placements.values()].some((p) => p.state === 'stopping');
    // A background request the pool could hold later waits for it (bounded by RELAY_QUEUE_TIMEOUT_MS) rather than a 503.
    const later = (w: Waiter): boolean => w.who.priority === 'background' && w.attempts.errors.length === 0 && this.placer.couldFitLater(model);
    const out = roomComing ? [] : strandedNow(stranded(), () => void (this.closed || this.pump(name))).filter((w) => !later(w));
    if (out.length > 0) {
      const fallback = this.placer.refusal(model);
      for (const w of out) w.reject(w.attempts.errors.at(-1) ?? w.attempts.last ?? fallback);
    }
  }

  /** A slot of `p` for one request (placement.ts): each release re-pumps M (a yielded slot once recorded) and re-arms the keep-alive. */
  private lease({ p, warm }: { p: Placement; warm: boolean }, model: ModelRecord, prefix: PromptPrefix | null, who: Requester): Lease {
    this.router.leased(p, prefix, warm);
    if (p.idleTimer) clearTimeout(p.idleTimer);
    p.idleTimer = null;
    this.waiting.served(p.model, who.key);
    const released = (): void => {
      if (p.state !== 'ready') return;
      this.pump(p.model);
      if (p.inFlight === 0) this.armIdleTimer(p);
    };
    return openLease(p, model, who, {
      now: () => this.now(),
      probe: () => this.watch.probe(p),
      adopted: (from) => this.router.adopt(p.model, from, p.id),
      answered: (r) => answered(p, model, r, { specs: this.specs, speeds: this.placer.speeds, launcher: this.deps.launcher, nodes: this.deps.nodes }),
      released: (yielded) => (yielded && p.state === 'ready' ? holdForRecord(p, this.deps.launcher, released) : released()),
    });
  }

  private armIdleTimer(p: Placement, ms = this.deps.config.keepAliveMs): void {
    armIdle(p, ms, () => void expireIdle(p, this.deps.launcher, (parked) => this.stop(p, `idle for ${ms} ms`, parked)));
  }

  private start(model: ModelRecord, plan: NewPlacement): Placement {
    const p = newPlacement(model, plan, this.need(model), this.now(), loadDeadlineMs(model.size, this.deps.config), this.specs.choose(model, plan.kind === 'shard'));
    // Victims are marked stopping in this same tick, so a concurrent plan counts their room as taken.
    const stops = plan.evict
      .map((id) => this.placements.get(id))
      .filter((v): v is Placement => v !== undefined)
      .map((v) => this.stop(v, `evicted (least recently used) to make room for "${model.name}"`));
    this.placements.set(p.id, p);
    const log = this.deps.log.child({ placement: p.id, model: model.name, kind: p.kind, node: p.node?.name });
    void (async () => {
      await Promise.all(stops);
      const running = await this.deps.launcher.start(p, model);
      if (p.state !== 'starting') {
        await this.deps.launcher.stop(p);
        return;
      }
      p.running = running;
      if (running.restored) this.router.adopt(model.name, running.restored.from, p.id);
      p.state = 'ready';
      p.readyAt = this.now();
      this.failed.delete(model.name);
      for (const m of machinesOf(p)) this.failures.succeeded(m ?? HUB, model.name);
      const seconds = (this.now() - p.startedAt) / 1000;
      this.deps.onLoad?.(model.name, seconds);
      log.info({ seconds, pid: running.pid, port: running.port }, 'placement ready');
      void running.exited?.then((why) => {
        if (p.state !== 'ready' || this.closed) return;
        this.markFailed(p, why, running.tail());
        if (p.kind === 'shard') void this.deps.launcher.stop(p);
        this.pump(p.model);
      });
      this.pump(model.name);
      if (p.inFlight === 0) this.armIdleTimer(p);
    })().catch((err: unknown) => {
      const e = isRelayError(err) ? err : new RelayError(ErrorCode.REPLICA_FAILED, String(err));
      // Already failed (its node was lost) or stopped (paused, evicted): that path re-planned the waiters.
      if (p.state !== 'starting') return;
      this.markFailed(p, e.message.split('\n')[0] ?? 'load failed', (e.details.tail as string | undefined) ?? '');
      void this.deps.launcher.stop(p);
      const machine = blamedMachine(p, e, (name) => this.deps.nodes?.get(name));
      if (machine) this.noteFailure(machine, model.name, `load failed: ${e.message.split('\n')[0]}`);
      this.placementFailed(model.name, e);
    });
    return p;
  }

  /**
   * A placement of M failed (a load, a crash, its node lost) while requests waited: it counts an attempt only for
   * the waiters it stranded — those no other live placement of M can serve — then M is re-planned. A waiter that
   * the hub's healthy replica will serve is not failed because some node went away.
   */
  private placementFailed(name: string, err: RelayError): void {
    const live = [...this.placements.values()].filter((p) => p.model === name && isLive(p));
    countStranding(this.waiting.of(name), live, err, MAX_ATTEMPTS);
    this.pump(name);
  }

  private noteFailure(machine: string, model: string, reason: string): void {
    const b = this.failures.failed(machine, model, reason);
    this.deps.log.warn({ machine, model, reason, failures: b.failures, retry_in_s: Math.round((b.until - b.at) / 1000) }, 'machine skipped for this model for a while');
  }

  private markFailed(p: Placement, message: string, tail: string): void {
    failPlacement(p, message, tail, this.now()); // its requests in flight end now, as for a stop
    this.placements.delete(p.id);
    this.router.forget(p.id);
    this.failed.set(p.model, p);
    this.deps.log.warn({ placement: p.id, model: p.model, message, tail }, 'placement failed');
  }

  /** `parked`: its slots were kept for the model's next replica, so the router keeps its prompt keys for it. */
  private async stop(p: Placement, reason: string, parked = false): Promise<void> {
    if (p.state === 'stopping' || p.state === 'failed') return;
    p.state = 'stopping';
    const answering = p.inFlight > 0;
    p.halt.abort(reason); // its requests in flight end now (proxy.ts), not when its process is killed
    if (p.idleTimer) clearTimeout(p.idleTimer);
    this.deps.log.info({ placement: p.id, model: p.model, node: p.node?.name, reason }, 'stopping placement');
    // Its slots are saved (kept for the model's next replica, the record of its answers) unless it just parked them.
    const stopped = await this.deps.launcher.stop(p, answering || (!parked && !this.closed));
    this.placements.delete(p.id);
    this.pumpAll();
    // What it held is remembered for the model's next replica once its slots are in the hub's store.
    if (parked || !stopped) this.router.stopped(p.model, p.id, parked);
    else void stopped.kept.then((kept) => this.router.stopped(p.model, p.id, kept));
  }

  /** A stopped (or yielded) placement's slots as token lists: the record its moved answers go on from (answer-records.ts). */
  answerRecord = (placementId: string, waitMs: number): Promise<SlotTokens[]> => this.deps.launcher.answerRecord?.(placementId, waitMs) ?? Promise.resolve([]);

  /** Room came free somewhere: every model with waiting requests may now be placed. */
  private pumpAll(): void {
    for (const name of this.waiting.models()) this.pump(name);
  }

  /** Stop the placements of a model; `idle`: only those serving nothing now (Ollama's keep_alive 0 unload). */
  async stopModel(name: string, reason: string, idle = false): Promise<void> {
    await Promise.all([...this.placements.values()].filter((p) => p.model === name && (!idle || (p.state === 'ready' && p.inFlight === 0))).map((p) => this.stop(p, reason)));
  }

  private on(conn: NodeConn): Placement[] {
    return [...this.placements.values()].filter((p) => machinesOf(p).includes(conn.name));
  }

  /** A node went away: its placements are gone at once; in-flight streams fail, waiting requests re-plan. */
  nodeLost(conn: NodeConn, why: string): void {
    for (const p of this.on(conn)) {
      this.markFailed(p, `node ${conn.name} ${why}`, '');
      void this.deps.launcher.stop(p);
      this.placementFailed(p.model, new RelayError(ErrorCode.NODE_LOST, `node ${conn.name} ${why}`, { node: conn.name }));
    }
  }

  /** A node paused: not a failure (the owner took the machine back); its placements are stopped. */
  async nodePaused(conn: NodeConn): Promise<void> {
    await Promise.all(this.on(conn).map((p) => this.stop(p, `node ${conn.name} paused (${conn.reason ?? 'by its owner'})`)));
  }

  /** The hub's own devices paused: its replicas and the shards with a hub stage stop; requests go to nodes. */
  async hubPaused(reason: string): Promise<void> {
    const mine = [...this.placements.values()].filter((p) => machinesOf(p).includes(null));
    await Promise.all(mine.map((p) => this.stop(p, `the hub's devices paused (${reason})`)));
  }

  /** After a hello or a heartbeat: the table made true to what the node runs (watch.ts). */
  reconcile = (conn: NodeConn): Promise<void> => this.watch.reconcile(conn);

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.router.close();
    this.waiting.rejectAll(new RelayError(ErrorCode.MODEL_UNAVAILABLE, 'the hub is shutting down'));
    await Promise.all([...this.placements.values()].map((p) => this.stop(p, 'hub shutting down')));
  }
}
