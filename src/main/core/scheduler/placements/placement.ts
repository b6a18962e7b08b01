import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { Duplex } from 'node:stream';
import type { NodeConn } from '../../pool/manager.js';
import type { ModelRecord } from '../../store/store.js';
import type { Restored } from '../slots/slot-keep.js';
import type { FitBreakdown } from '../decide/fit.js';
import type { ShardPlan } from '../decide/shard.js';
import type { SpecChoice } from '../decide/speculation.js';
import type { PlacementFailure, PlacementStateName } from '../../../../shared/status.js';
import type { RunningView, Who } from '../decide/turns.js';
import { nextMsPerToken, nextPromptMsPerToken, stallMs } from '../decide/routing.js';

/** Where a new placement goes, as the placer planned it (placer.ts), with the placements it stops to make room. */
export type NewPlacement =
  | { readonly kind: 'host'; readonly device: string; readonly evict: readonly string[] }
  | { readonly kind: 'node'; readonly conn: NodeConn; readonly device: string; readonly evict: readonly string[] }
  | { readonly kind: 'shard'; readonly plan: Extract<ShardPlan, { kind: 'shard' }>; readonly evict: readonly string[] };

/**
 * A placement is one running copy of a model that can answer requests: a replica on the hub's own device
 * (`host`), a replica on a node (`node`), or a pipeline shard across the hub and nodes (`shard`). A model may
 * have several at once; the scheduler keeps them in one table and the launcher makes them real.
 */
export type PlacementKind = 'host' | 'node' | 'shard';
export type PlacementState = PlacementStateName;
export type Failure = PlacementFailure;

/** What the launcher hands back once a placement answers: how to reach it and how to watch it. */
export interface Running {
  /** The URL requests are sent to; a node replica's is a name, reached through `connect`. */
  readonly baseUrl: string;
  /** For a node replica: each HTTP connection is a new http stream through the node's tunnel. */
  readonly connect?: () => Duplex;
  readonly port: number | null;
  readonly pid: number | null;
  /** llama-server's load report (host replicas and shard heads): where weights and KV landed. */
  readonly buffers: readonly string[];
  /** Resolves with a description when a local process exits by itself (a node replica's exit comes by heartbeat). */
  readonly exited: Promise<string> | null;
  /** The last lines of its output, for a failure report. */
  tail(): string;
  /** The stopped placement whose kept slots this one restored before its first request (slot-keep.ts), and their bytes. */
  readonly restored?: Restored | null;
  /**
   * A running one-slot replica reads the state placement `from` kept — an answer that moved here from it — into its
   * slot, while the caller's lease holds that slot; what it read, or null (slot-keep.ts, slot-carry.ts).
   */
  readonly takeIn?: (from: string) => Promise<Restored | null>;
}

export interface Placement {
  readonly id: string;
  readonly kind: PlacementKind;
  readonly model: string;
  readonly sha256: string;
  /** A node replica's node; null for a host replica or a shard. */
  readonly node: NodeConn | null;
  /** The device of a replica; a shard's hub stage device ('none' when the hub holds no stage). */
  readonly device: string;
  readonly fit: FitBreakdown;
  /** A shard's stages (hub and nodes), as planned. */
  readonly shardPlan: Extract<ShardPlan, { kind: 'shard' }> | null;
  state: PlacementState;
  /**
   * Aborted (with the reason as a string) the moment the scheduler decides to stop it — a pause, an eviction, the
   * keep-alive: its requests in flight end now, instead of waiting on a llama-server that stops generating at
   * SIGTERM but keeps their connections open until it is killed.
   */
  readonly halt: AbortController;
  running: Running | null;
  inFlight: number;
  /** Requests it has answered (leases released). */
  served: number;
  readonly startedAt: number;
  /** How long its llama-server's load may take (scheduler/decide/deadline.ts: a base plus a term per GiB of weights). */
  readonly deadlineMs: number;
  /** When its llama-server's load began (set by the launcher; a push or an rpc-cache fill comes before), or null. */
  loadingSince: number | null;
  /** The loading llama-server's pid on the hub (host replica, shard head), before `running` has it. */
  loadingPid: number | null;
  /** When it became ready (0 while loading): a device reading older than this does not count its memory yet. */
  readyAt: number;
  lastUsedAt: number;
  /** Its leases in flight, as the turns rule sees them (decide/turns.ts): who, since when, whether one can yield. */
  readonly leases: Map<string, LeaseInFlight>;
  /** When it last took an interactive request (0: never): a model people use is not evicted for a background one. */
  lastInteractiveAt: number;
  /** Recent milliseconds per generated token (moving average), null until a request reported its timings. */
  msPerToken: number | null;
  /** msPerToken over the answers that drafted nothing: the placement's own speed, what a plan's prediction is judged by. */
  plainMsPerToken: number | null;
  /** A shard's measured share of its ms per token, by stage in plan order (run/speeds.ts); null until split. */
  stageMs: number[] | null;
  /** Recent milliseconds per prompt token evaluated (moving average; routing.ts), null until measured. */
  promptMsPerToken: number | null;
  /** Requests sent here because its KV cache held a prefix of their prompt (prefix-aware routing). */
  prefixHits: number;
  /** Slots of yielded answers held while their tokens are recorded (run/yields.ts): promised to a waiting person. */
  recording: number;
  /** The speculation it runs with (--spec-type), chosen at its start, and why. */
  readonly spec: SpecChoice;
  /** With speculation: tokens drafted and the tokens the model accepted, over the requests served. */
  drafted: number;
  draftAccepted: number;
  idleTimer: NodeJS.Timeout | null;
  failure: Failure | null;
  /** Checks in a row that found its llama-server not answering /health (two fail it). */
  unresponsive: number;
}

/** What a request's answer said of its placement's speed (hub/proxy/proxy.ts's Usage is one). */
export interface LeaseReport {
  readonly tokensPerSecond?: number | null;
  readonly promptMs?: number | null;
  readonly promptEvaluated?: number | null;
  readonly drafted?: number | null;
  readonly draftAccepted?: number | null;
}

/** A lease in flight on a placement: the turns rule's view of it (decide/turns.ts) and how to make it yield. */
export interface LeaseInFlight extends RunningView {
  yielding: boolean;
  /** Stop the answer on its slot (YieldHalt): it goes on afterwards through the move path. */
  yield(): void;
}

/** A claim on one slot of a ready placement for one request; release() exactly once when the response is done. */
export interface Lease {
  readonly placementId: string;
  /** Whom it serves (its key and class). */
  readonly who: Who;
  /** What serves it: a host or node replica, or a shard (for the words of an error). */
  readonly kind: PlacementKind;
  /** Its machines by name ("hub", "kitchen", "hub+kitchen" for a shard), for what the pool shows. */
  readonly where: string;
  readonly baseUrl: string;
  readonly connect?: () => Duplex;
  readonly model: ModelRecord;
  /**
   * Aborted when the scheduler stops its placement — `reason` says why ("node north paused (…)") — or asks this one
   * answer to give its slot to a person who waits (a YieldHalt).
   */
  readonly halted: AbortSignal;
  /** Running.takeIn: the state `from` kept of an answer that moved here, read into the slot this lease holds (its bytes). */
  readonly takeIn?: (from: string) => Promise<number>;
  /** The stopped placement whose state this one read back at its start, and the bytes (Running.restored). */
  readonly restored?: Restored;
  /** What llama-server reported of the request (speeds, for routing by recent time per token and prompt speed). */
  release(report?: LeaseReport | null): void;
  /**
   * How long a request through it may hear nothing before `probe` is asked (model-aware: a few of its recent
   * token times, within 1–2.5 s), and the probe: are its nodes there, are its processes answering? A probe
   * that finds them gone or hung fails the placement, which ends the request's stream (or sends it elsewhere).
   */
  stallMs(): number;
  probe(): Promise<void>;
}

/** The machines a placement occupies, by node name (null = the hub). */
export function machinesOf(p: Placement): (string | null)[] {
  if (p.shardPlan) return p.shardPlan.stages.map((st) => st.node);
  return [p.node?.name ?? null];
}

export function isLive(p: Placement): boolean {
  return p.state === 'starting' || p.state === 'ready';
}

/** What /status says of any placement (a replica or a shard). */
export type { PlacementStatus, ReplicaStatus, ShardStatus } from '../../../../shared/status.js';

/** Every request in flight on a placement listens to its halt: as many as it has slots (up to 64), no warning. */
function haltController(): AbortController {
  const c = new AbortController();
  setMaxListeners(0, c.signal);
  return c;
}

/** A placement about to start for `model` as the placer planned it (a fresh id; nothing running yet). */
export function newPlacement(model: ModelRecord, plan: NewPlacement, fit: FitBreakdown, now: number, deadlineMs: number, spec: SpecChoice): Placement {
  return {
    id: randomUUID().slice(0, 8),
    spec,
    kind: plan.kind,
    model: model.name,
    sha256: model.sha256,
    node: plan.kind === 'node' ? plan.conn : null,
    device: plan.kind === 'shard' ? (plan.plan.stages.find((st) => st.node === null)?.device ?? 'none') : plan.device,
    fit,
    shardPlan: plan.kind === 'shard' ? plan.plan : null,
    state: 'starting',
    halt: haltController(),
    running: null,
    inFlight: 0,
    served: 0,
    startedAt: now,
    deadlineMs,
    loadingSince: null,
    loadingPid: null,
    readyAt: 0,
    lastUsedAt: now,
    msPerToken: null,
    stageMs: null,
    plainMsPerToken: null,
    promptMsPerToken: null,
    prefixHits: 0,
    recording: 0,
    drafted: 0,
    draftAccepted: 0,
    idleTimer: null,
    failure: null,
    unresponsive: 0,
    leases: new Map(),
    lastInteractiveAt: 0,
  };
}

/** Mark a placement failed: its requests in flight end now (its `halt`), its failure kept for /status. */
export function failPlacement(p: Placement, message: string, tail: string, now: number): void {
  p.state = 'failed';
  p.failure = { message, tail, at: new Date(now).toISOString() };
  if (p.idleTimer) clearTimeout(p.idleTimer);
  p.halt.abort(new FailedHalt(message));
}

/** Why one answer was halted while its placement runs on: it gave its slot to an interactive request (decide/turns.ts). */
export class YieldHalt {
  toString(): string {
    return 'yielded its slot to an interactive request';
  }
}

/**
 * Why a failed placement's leases were halted (its process hung or died, its node went silent): the answers it was
 * streaming end with their error, as when its connection breaks — only a placement stopped on purpose (a pause, an
 * eviction, the keep-alive) hands its answers on to another (hub/proxy/continuation.ts).
 */
export class FailedHalt {
  constructor(readonly message: string) {}
  toString(): string {
    return this.message;
  }
}

/**
 * A lease on one slot of a ready placement: counts it in flight now, and on its one release counts it served
 * and folds the speed llama-server reported into the placement's recent time per token (routing by speed, the
 * stall limit) before telling the scheduler (`released`; `yielded` true when it had been asked to yield).
 */
export function openLease(
  p: Placement,
  model: ModelRecord,
  who: Who & { readonly canYield: boolean },
  hooks: { now(): number; probe(): Promise<void>; released(yielded: boolean): void; adopted(from: string): void; answered?(report: LeaseReport | null | undefined): void },
): Lease {
  const running = p.running!;
  const { takeIn } = running;
  p.inFlight++;
  p.lastUsedAt = hooks.now();
  if (who.priority === 'interactive') p.lastInteractiveAt = hooks.now();
  let released = false;
  const own = haltController();
  const id = randomUUID();
  const inFlight: LeaseInFlight = {
    id,
    placementId: p.id,
    priority: who.priority,
    canYield: who.canYield,
    yielding: false,
    since: hooks.now(),
    yield: () => {
      if (inFlight.yielding || released) return;
      inFlight.yielding = true;
      own.abort(new YieldHalt());
    },
  };
  p.leases.set(id, inFlight);
  return {
    placementId: p.id,
    who: { key: who.key, priority: who.priority },
    kind: p.kind,
    where: machinesOf(p)
      .map((n) => n ?? 'hub')
      .join('+'),
    baseUrl: running.baseUrl,
    ...(running.connect ? { connect: running.connect } : {}),
    ...(takeIn
      ? {
          takeIn: async (from: string) => {
            const r = await takeIn(from);
            if (r) hooks.adopted(r.from); // it holds what `from` held: the router's keys for it follow
            return r?.bytes ?? 0;
          },
        }
      : {}),
    ...(running.restored ? { restored: running.restored } : {}),
    model,
    halted: AbortSignal.any([p.halt.signal, own.signal]),
    stallMs: () => stallMs(p.msPerToken),
    probe: hooks.probe,
    release: (report) => {
      if (released) return;
      released = true;
      p.leases.delete(id);
      p.inFlight--;
      p.served++;
      p.lastUsedAt = hooks.now();
      p.msPerToken = nextMsPerToken(p.msPerToken, report?.tokensPerSecond);
      p.promptMsPerToken = nextPromptMsPerToken(p.promptMsPerToken, report?.promptMs, report?.promptEvaluated);
      p.drafted += report?.drafted ?? 0;
      p.draftAccepted += report?.draftAccepted ?? 0;
      hooks.answered?.(report);
      hooks.released(inFlight.yielding);
    },
  };
}

/** (Re-)arm a placement's keep-alive: `idle` runs once it has served nothing for `ms` (and is still ready then). */
export function armIdle(p: Placement, ms: number, idle: () => void): void {
  if (p.idleTimer) clearTimeout(p.idleTimer);
  p.idleTimer = setTimeout(() => {
    p.idleTimer = null;
    if (p.inFlight === 0 && p.state === 'ready') idle();
  }, ms);
  p.idleTimer.unref();
}
