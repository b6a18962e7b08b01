import assert from 'node:assert/strict';
import pino from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../src/shared/errors.js';
import { hubConfigFromEnv, type HubConfig } from '../../src/main/core/config.js';
import type { Device } from '../../src/main/core/gpu/inventory.js';
import type { ModelRegistry } from '../../src/main/core/models/registry.js';
import type { NodeConn, NodeManager } from '../../src/main/core/pool/manager.js';
import type { KeptSlots } from '../../src/main/core/scheduler/slots/slot-keep.js';
import type { Launcher } from '../../src/main/core/scheduler/launch/launcher.js';
import type { Liveness } from '../../src/main/core/llama/liveness.js';
import type { Lease, Placement, Running } from '../../src/main/core/scheduler/placements/placement.js';
import { Scheduler } from '../../src/main/core/scheduler/scheduler.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';

/**
 * The scheduler's test doubles: models, fake nodes, and a launcher whose every start waits until the test
 * lets it succeed or fail (test/unit/scheduler.test.ts plays every interleaving out with them).
 */
export const log = pino({ level: 'silent' });

export function model(name: string, requiredMb: number): ModelRecord {
  return {
    name,
    path: `/models/${name}.gguf`,
    sha256: `sha-${name}`,
    size: requiredMb * 1024 * 1024,
    mtimeMs: 0,
    required_vram_mb: requiredMb,
    arch: 'llama',
    block_count: 4,
    kv_bytes_per_token: 1024,
    expert_count: 0,
    expert_used_count: 0,
    context_length: 4096,
    embedding: false,
    added_at: new Date(0).toISOString(),
  };
}

export interface Start {
  readonly p: Placement;
  /** The load finished; `buffers`: the load report llama-server printed (launch-host.ts loadReport). */
  ok(buffers?: string[]): void;
  fail(code?: ErrorCode, details?: Record<string, unknown>): void;
  crash(): void;
}

/** A launcher whose loads the test finishes by hand. */
export class ManualLauncher implements Launcher {
  readonly starts: Start[] = [];
  readonly stopped: string[] = [];
  private waiters: (() => void)[] = [];

  start(p: Placement): Promise<Running> {
    return new Promise((resolve, reject) => {
      let crash!: (why: string) => void;
      const exited = new Promise<string>((r) => (crash = r));
      this.starts.push({
        p,
        ok: (buffers = []) => resolve({ baseUrl: `http://fake/${p.id}`, port: null, pid: null, buffers, exited, tail: () => '' }),
        fail: (code = ErrorCode.REPLICA_FAILED, details = {}) => reject(new RelayError(code, `load of ${p.model} failed on ${p.node?.name ?? 'hub'}`, details)),
        crash: () => crash('llama-server exited unexpectedly (SIGKILL)'),
      });
      for (const w of this.waiters.splice(0)) w();
    });
  }

  /** Set by a test: a yielded answer's slot is held until the promise this returns settles (its tokens recorded). */
  recordSlots?: (p: Placement) => Promise<void>;

  /** Stops wait for release() while set (a process still exiting), like a llama-server killed mid-load. */
  holdStops = false;
  private held: (() => void)[] = [];

  /** keep() calls, each settled by the test: `settle(true)` keeps the slots (a later discard() is recorded), false none. */
  readonly keeps: { p: Placement; settle(kept: boolean): void }[] = [];
  readonly discarded: string[] = [];

  keep(p: Placement): Promise<KeptSlots | null> {
    return new Promise((resolve) => this.keeps.push({ p, settle: (kept) => resolve(kept ? { discard: () => void this.discarded.push(p.id) } : null) }));
  }

  /** Set: each stop says its slots are on their way to the hub's store, held there once the test settles this. */
  keptLater: Promise<boolean> | null = null;
  /** The `save` flag each stop was given (its slots saved first), by placement id. */
  readonly saved = new Map<string, boolean>();

  async stop(p: Placement, save = false): Promise<{ readonly kept: Promise<boolean> } | void> {
    this.stopped.push(p.id);
    this.saved.set(p.id, save);
    if (this.holdStops) await new Promise<void>((r) => this.held.push(r));
    return this.keptLater ? { kept: this.keptLater } : undefined;
  }

  /** Let every held stop finish. */
  releaseStops(): void {
    for (const r of this.held.splice(0)) r();
  }

  shardInfo(): null {
    return null;
  }

  /** rpc-servers this launcher expects, as `node/rpc`. */
  readonly rpcs = new Set<string>();
  expectsRpc(node: string, rpcId: string): boolean {
    return this.rpcs.has(`${node}/${rpcId}`);
  }

  /** What check() answers, by placement id (default ok): a test makes a placement hang. */
  readonly liveness = new Map<string, Liveness>();
  check(p: Placement): Promise<Liveness> {
    return Promise.resolve(this.liveness.get(p.id) ?? 'ok');
  }

  /** The n-th start (0-based), once it has been asked for. */
  async nth(n: number): Promise<Start> {
    while (this.starts.length <= n) await new Promise<void>((r) => this.waiters.push(r));
    return this.starts[n]!;
  }
}

export function fakeNode(name: string, freeMb: number, extra: Partial<NodeConn> = {}): NodeConn {
  return {
    name,
    alive: true,
    availability: 'idle',
    reason: null,
    schedule: '',
    cache: new Map(),
    replicas: [],
    rpcs: [],
    devicesAt: 0,
    devices: [{ id: 'CPU', kind: 'cpu', description: 'cpu', totalMb: freeMb, freeMb }],
    command: async () => ({ ok: true, data: {} }),
    probe: async () => true,
    link: () => ({ rttMs: null, bytesPerMs: null }),
    ...extra,
  } as unknown as NodeConn;
}

export function setup(o: {
  hubMb?: number;
  nodes?: NodeConn[];
  models: ModelRecord[];
  env?: Record<string, string>;
  hubPaused?: () => boolean;
  config?: Partial<HubConfig>;
  now?: () => number;
  /** The registry's check of a model's file (default: unchanged, at once); a test holds it to stand for a re-hash. */
  verify?: (name: string) => Promise<void>;
}) {
  const config = hubConfigFromEnv({ HOME: '/tmp', RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', ...o.env }, { port: 0, ...o.config });
  const devices: Device[] = o.hubMb
    ? [{ id: 'CPU', kind: 'cpu', description: 'cpu budget', totalMb: o.hubMb, reportedFreeMb: o.hubMb, utilizationPct: null, source: 'cpu-budget', busId: null, readAt: 0 }]
    : [];
  const byName = new Map(o.models.map((m) => [m.name, m]));
  const registry = {
    verify: async (n: string) => {
      await o.verify?.(n);
      return { model: byName.get(n)!, changed: false };
    },
    get: (n: string) => byName.get(n),
  } as unknown as ModelRegistry;
  const nodes = o.nodes ?? [];
  const manager = {
    connected: () => nodes.filter((n) => n.alive),
    get: (n: string) => nodes.find((x) => x.name === n),
    records: () => nodes.map((n) => ({ name: n.name, revoked_at: null })),
    push: async () => undefined,
  } as unknown as NodeManager;
  const launcher = new ManualLauncher();
  const scheduler = new Scheduler({ config, registry, launcher, devices: () => devices, nodes: manager, log, hubPaused: o.hubPaused, ...(o.now ? { now: o.now } : {}) });
  return { scheduler, launcher, config };
}

export const where = (l: Lease, launcher: ManualLauncher): string => {
  const s = launcher.starts.find((x) => x.p.id === l.placementId)!;
  return s.p.node?.name ?? 'hub';
};

/** acquire() reads the registry first: let it reach the queue. */
export const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

export async function rejected(p: Promise<unknown>): Promise<RelayError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(isRelayError(err), `expected a RelayError, got ${String(err)}`);
  return err;
}
