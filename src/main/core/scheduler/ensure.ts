import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import type { Device } from '../gpu/inventory.js';
import { effectiveFlashAttn, replicaPlacement, type FlashAttn, type KvCacheType } from '../llama/argv.js';
import type { LlamaInstall } from '../llama/install.js';
import { startLlamaServer, type RunningLlamaServer } from '../llama/processes.js';
import { describeExit } from '../llama/supervisor.js';
import type { NodeConn, NodeManager } from '../pool/manager.js';
import type { ModelRegistry } from '../models/registry.js';
import type { ModelRecord } from '../store/store.js';
import { fitNeed, type FitBreakdown } from './fit.js';
import { FailureMemory } from './backoff.js';
import { chooseEvictions, describeNeed, freeAfterReservations, planHostReplica, shortfallMessage, type HostPlan, type ReplicaView } from './plan.js';
import { planShard, shardFlags, type ShardDevice, type ShardModel, type ShardPlan, type Stage } from './shard.js';
import { openRpcBridge, type RpcBridge } from '../pool/rpc-bridge.js';

/**
 * Ensure: for a request naming model M, find or make a placement, in the spec's order:
 *   1. an existing ready placement of M;
 *   2. a replica on the hub's own device;
 *   3. a replica on a node that fits (nodes issue);
 *   4. a pipeline shard across hub + nodes (shards issue);
 *   5. otherwise 503 model_unavailable naming the shortfall.
 * A shard is a placement like a replica (leased, kept alive, evicted, failed the same way) whose head
 * llama-server on the hub drives ggml-rpc-servers on the member nodes through rpc bridges.
 */

export type ReplicaState = 'starting' | 'ready' | 'failed' | 'stopping';

/** What /status says of any placement (a replica or a shard). */
export interface PlacementStatus {
  readonly id: string;
  readonly model: string;
  readonly state: ReplicaState;
  /** The local llama-server (host replica, shard head); for a node replica, the node's. */
  readonly port: number | null;
  readonly pid: number | null;
  readonly ctx: number;
  readonly slots: number;
  readonly kv_cache_type: KvCacheType;
  readonly failure: { message: string; tail: string; at: string } | null;
}

export interface ReplicaStatus extends PlacementStatus {
  readonly sha256: string;
  readonly where: 'host' | 'node';
  readonly node: string | null;
  readonly device: string;
  readonly flash_attn: FlashAttn;
  readonly need_mb: number;
  readonly in_flight: number;
  readonly started_at: string;
  readonly last_used_at: string;
  /** llama-server's load report for a host replica: where its weights and KV landed (`Vulkan0 model buffer size = …`). */
  readonly buffers: string[];
}

interface Replica {
  id: string;
  model: string;
  sha256: string;
  /** null = the hub's own device. */
  node: NodeConn | null;
  remotePid: number | null;
  device: string;
  state: ReplicaState;
  fit: FitBreakdown;
  server: RunningLlamaServer | null;
  inFlight: number;
  startedAt: number;
  /** When it became ready (0 while loading): a device reading older than this does not count its memory yet. */
  readyAt: number;
  lastUsedAt: number;
  /** The load report, kept when it became ready (the output buffer rolls over). */
  buffers: string[];
  idleTimer: NodeJS.Timeout | null;
  failure: { message: string; tail: string; at: string } | null;
  loading: Promise<Replica> | null;
  shard: ShardState | null;
}

interface ShardMember {
  stage: Stage;
  conn: NodeConn;
  rpcId: string;
  bridge: RpcBridge | null;
}

interface ShardState {
  plan: Extract<ShardPlan, { kind: 'shard' }>;
  members: ShardMember[];
  warnings: string[];
  argv: readonly string[];
  buffers: string[];
}

export interface ShardStatus extends PlacementStatus {
  readonly stages: { index: number; node: string | null; device: string; layers: [number, number]; need_mb: number; free_mb: number; output: boolean; rpc_endpoint: string | null; rpc_bytes: number | null }[];
  readonly warnings: string[];
  /** llama-server's own report of where the weights went (its "model buffer size" lines). */
  readonly buffers: string[];
}

/** A claim on a ready replica for one request; release() exactly once when the response is done. */
export interface Lease {
  readonly replicaId: string;
  readonly baseUrl: string;
  /** For a node replica: each HTTP connection is a new http stream through the node's tunnel. */
  readonly connect?: () => Duplex;
  readonly model: ModelRecord;
  release(): void;
}

export interface SchedulerDeps {
  readonly config: HubConfig;
  readonly registry: ModelRegistry;
  readonly install: LlamaInstall;
  readonly devices: () => Device[];
  readonly nodes?: NodeManager;
  readonly log: Logger;
  readonly onLoad?: (model: string, seconds: number) => void;
  readonly now?: () => number;
}

/** llama-server's lines that say where weights and KV landed, as `<buffer type> model|KV buffer size = N MiB`. */
function loadReport(server: RunningLlamaServer): string[] {
  return server.child.output().filter((l) => /(model|KV) buffer size/.test(l)).map((l) => l.replace(/^.*?(load_tensors|llama_kv_cache\w*):\s*/, '').trim());
}

/** OpenAI-style embeddings need a pooled vector: a header without a pooling type gets mean pooling. */
function poolingFor(model: ModelRecord): 'mean' | null {
  return model.embedding && (model.pooling_type === null || model.pooling_type === undefined) ? 'mean' : null;
}

export class Scheduler {
  private readonly replicas = new Map<string, Replica>();
  /** Failed replicas stay visible in /status until the next load of their model replaces them. */
  private readonly failed = new Map<string, Replica>();
  private closed = false;
  /** (node, model) pairs whose placement failed to load or crashed: skipped for that model for a while. */
  private readonly failures = new FailureMemory(() => this.now());

  constructor(private readonly d: SchedulerDeps) {}

  private now(): number {
    return this.d.now?.() ?? Date.now();
  }

  need(model: ModelRecord): FitBreakdown {
    const need = fitNeed(
      { requiredVramMb: model.required_vram_mb, sizeBytes: model.size, kvBytesPerToken: model.kv_bytes_per_token },
      this.d.config,
    );
    this.d.log.debug({ model: model.name, fit: need }, 'fit-check');
    return need;
  }

  /** Replicas as the pure planner sees them, on one machine: the hub (node null) or a node by name. */
  private views(node: string | null, evicting?: ReadonlySet<string>): ReplicaView[] {
    const out: ReplicaView[] = [];
    for (const r of this.replicas.values()) {
      const base = { id: r.id, model: r.model, state: r.state, inFlight: r.inFlight, lastUsedAt: r.lastUsedAt, readyAt: r.readyAt, evict: evicting?.has(r.id) ?? false };
      if (r.shard) {
        for (const st of r.shard.plan.stages) if (st.node === node) out.push({ ...base, device: st.device, needMb: st.needMb });
      } else if ((r.node?.name ?? null) === node) {
        out.push({ ...base, device: r.device, needMb: r.fit.needMb });
      }
    }
    return out;
  }

  private shardModel(model: ModelRecord): ShardModel | null {
    if (!model.block_count) return null;
    return {
      name: model.name,
      blockCount: model.block_count,
      weightsMb: model.required_vram_mb ?? model.size / (1024 * 1024),
      kvBytesPerToken: model.kv_bytes_per_token,
      isMoe: model.expert_count > 0 && model.expert_used_count > 0,
      // The experts' share of the weights, scaled like the weights themselves (required_vram_mb or the file).
      expertWeightsMb: model.expert_bytes != null && model.tensor_bytes ? (model.required_vram_mb ?? model.size / (1024 * 1024)) * (model.expert_bytes / model.tensor_bytes) : null,
    };
  }

  /**
   * Step 4's plan: the hub's device plus connected, unpaused nodes' devices, with what each has free
   * (`evicting`: as if those placements were stopped first).
   */
  private planShardFor(model: ModelRecord, evicting?: ReadonlySet<string>): ShardPlan {
    const sm = this.shardModel(model);
    if (!sm) return { kind: 'none', reason: 'the GGUF header gives no layer count to split' };
    const devices: ShardDevice[] = freeAfterReservations(this.d.devices(), this.views(null, evicting))
      .map((d) => ({ node: null, device: d.id, kind: d.kind, freeMb: d.freeMb, totalMb: d.totalMb }));
    for (const conn of this.d.nodes?.connected() ?? []) {
      if (conn.availability === 'paused' || this.failures.blocked(conn.name, model.name)) continue;
      const free = freeAfterReservations(conn.devices.map((d) => ({ id: d.id, kind: d.kind, totalMb: d.totalMb, reportedFreeMb: d.freeMb })), this.views(conn.name, evicting));
      for (const d of free) devices.push({ node: conn.name, device: d.id, kind: d.kind, freeMb: d.freeMb, totalMb: d.totalMb });
    }
    return planShard(devices, sm, this.d.config);
  }

  private planHost(model: ModelRecord, evicting?: ReadonlySet<string>): HostPlan {
    const views = this.views(null, evicting);
    return planHostReplica(this.need(model), freeAfterReservations(this.d.devices(), views), views.filter((v) => !v.evict));
  }

  /**
   * Step 3's choice: among connected nodes that are not paused, one whose device fits M without evicting
   * anything (a node's replicas belong to other requests); a node that already holds the file first.
   */
  private planNode(model: ModelRecord, evicting?: ReadonlySet<string>): { conn: NodeConn; device: string } | null {
    const need = this.need(model);
    let best: { conn: NodeConn; device: string; cached: boolean; free: number } | null = null;
    for (const conn of this.d.nodes?.connected() ?? []) {
      if (conn.availability === 'paused' || this.failures.blocked(conn.name, model.name)) continue;
      const devices = conn.devices.map((d) => ({ id: d.id, kind: d.kind, totalMb: d.totalMb, reportedFreeMb: d.freeMb }));
      const plan = planHostReplica(need, freeAfterReservations(devices, this.views(conn.name, evicting)), []);
      if (plan.kind !== 'host') continue;
      const free = devices.find((d) => d.id === plan.device)!.reportedFreeMb;
      const cached = conn.cache.has(model.sha256);
      if (!best || (cached && !best.cached) || (cached === best.cached && free > best.free)) best = { conn, device: plan.device, cached, free };
    }
    return best ? { conn: best.conn, device: best.device } : null;
  }

  /** What the nodes could offer, for the 503 message. */
  private nodesSummary(): string {
    const recs = this.d.nodes?.status() ?? [];
    if (recs.length === 0) return 'no node has joined (relay nodes token, then relay up on another machine)';
    return `nodes: ${recs.map((n) => {
      const devs = (n.devices as { id: string; freeMb: number; totalMb: number }[]);
      if (!n.connected) return `${String(n.name)} ${String(n.state)}`;
      if (n.state === 'paused') return `${String(n.name)} paused (${String(n.reason)})`;
      const views = this.views(String(n.name));
      const free = freeAfterReservations(devs.map((d) => ({ id: d.id, kind: 'cpu', totalMb: d.totalMb, reportedFreeMb: d.freeMb })), views);
      return `${String(n.name)} ${free.map((d) => `${d.id} ${Math.floor(d.freeMb)} MB free of ${d.totalMb} MB`).join(', ') || 'no devices'}`;
    }).join('; ')}`;
  }

  private unavailable(model: ModelRecord, plan: Extract<HostPlan, { kind: 'none' }>): string {
    return `${shortfallMessage(model.name, plan)}; ${this.nodesSummary()}`;
  }

  /** Whether the pool can host the model now, and if not, why (for /v1/models and /status). */
  availability(model: ModelRecord): { available: boolean; reason: string | null } {
    if (this.findServing(model)) return { available: true, reason: null };
    const plan = this.planHost(model);
    if (plan.kind !== 'none' || this.planNode(model) || this.planShardFor(model).kind === 'shard') return { available: true, reason: null };
    return { available: false, reason: this.unavailable(model, plan) };
  }

  private findServing(model: ModelRecord): Replica | undefined {
    return [...this.replicas.values()].find((r) => r.model === model.name && r.sha256 === model.sha256 && (r.state === 'ready' || r.state === 'starting'));
  }

  /** Ensure a ready replica of `name` and lease it. */
  async acquire(name: string): Promise<Lease> {
    if (this.closed) throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, 'the hub is shutting down');
    // A file that changed on disk is re-hashed first and its old replicas stopped: never serve old bytes.
    const { model, changed } = await this.d.registry.verify(name);
    if (changed) await this.stopModel(name, 'model file changed on disk');

    // 1. An existing placement (ready, or loading: concurrent first requests share one load).
    let replica = this.findServing(model);
    while (!replica) {
      const host = this.planHost(model);
      // 2. A replica on the hub's own device.
      if (host.kind === 'host') replica = this.startHostReplica(model, host);
      else {
        // 3. A replica on a node that fits.
        const node = this.planNode(model);
        if (node) replica = this.startNodeReplica(model, node.conn, node.device);
        else {
          // 4. A pipeline shard across the hub and nodes.
          const shard = this.planShardFor(model);
          if (shard.kind === 'shard') replica = this.startShard(model, shard);
          else {
            // 5. Room held by idle placements goes to the request that needs it, but only room that makes a
            // plan succeed: the fewest least-recently-used idle placements whose stopping lets M be placed.
            // When even stopping all of them would not, nothing is stopped and M is unavailable.
            const idle = [...this.replicas.values()].filter((r) => r.state === 'ready' && r.inFlight === 0);
            const victims = chooseEvictions(idle, (ev) => this.planHost(model, ev).kind === 'host' || this.planNode(model, ev) !== null || this.planShardFor(model, ev).kind === 'shard');
            if (!victims) throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, this.unavailable(model, host), { model: model.name, need_mb: Math.ceil(host.need.needMb) });
            // The plan is made with the victims' room counted free: a GPU's reading may not show it yet.
            const ev = new Set(victims.map((v) => v.id));
            const hostPlan = this.planHost(model, ev);
            const nodePlan = hostPlan.kind === 'host' ? null : this.planNode(model, ev);
            const shardPlan = hostPlan.kind === 'host' || nodePlan ? null : this.planShardFor(model, ev);
            await Promise.all(victims.map((v) => this.stopReplica(v, `evicted (least recently used) to make room for "${model.name}"`)));
            replica = this.findServing(model); // a concurrent request may have placed it meanwhile
            if (!replica && hostPlan.kind === 'host') replica = this.startHostReplica(model, hostPlan);
            else if (!replica && nodePlan) replica = this.startNodeReplica(model, nodePlan.conn, nodePlan.device);
            else if (!replica && shardPlan?.kind === 'shard') replica = this.startShard(model, shardPlan);
          }
        }
      }
    }
    if (replica.loading) replica = await replica.loading;
    if (replica.state !== 'ready' || (!replica.server && !replica.node)) {
      throw new RelayError(ErrorCode.REPLICA_FAILED, `the replica of "${name}" is ${replica.state}${replica.failure ? `: ${replica.failure.message}` : ''}`, { model: name });
    }
    return this.lease(replica, model);
  }

  private lease(r: Replica, model: ModelRecord): Lease {
    r.inFlight++;
    r.lastUsedAt = this.now();
    if (r.idleTimer) {
      clearTimeout(r.idleTimer);
      r.idleTimer = null;
    }
    let released = false;
    const node = r.node;
    return {
      replicaId: r.id,
      baseUrl: node ? `http://${node.name}.node.relay` : r.server!.baseUrl,
      ...(node ? { connect: () => node.open({ kind: 'http', replica: r.id }) } : {}),
      model,
      release: () => {
        if (released) return;
        released = true;
        r.inFlight--;
        r.lastUsedAt = this.now();
        if (r.inFlight === 0 && r.state === 'ready') this.armIdleTimer(r);
      },
    };
  }

  private armIdleTimer(r: Replica): void {
    if (r.idleTimer) clearTimeout(r.idleTimer);
    r.idleTimer = setTimeout(() => {
      r.idleTimer = null;
      if (r.inFlight === 0 && r.state === 'ready') void this.stopReplica(r, `idle for ${this.d.config.keepAliveMs} ms`);
    }, this.d.config.keepAliveMs);
    r.idleTimer.unref();
  }

  private newReplica(model: ModelRecord, node: NodeConn | null, device: string): Replica {
    const r: Replica = {
      id: randomUUID().slice(0, 8),
      model: model.name,
      sha256: model.sha256,
      node,
      remotePid: null,
      device,
      state: 'starting',
      fit: this.need(model),
      server: null,
      inFlight: 0,
      startedAt: this.now(),
      readyAt: 0,
      buffers: [],
      lastUsedAt: this.now(),
      idleTimer: null,
      failure: null,
      loading: null,
      shard: null,
    };
    this.replicas.set(r.id, r);
    this.failed.delete(model.name);
    return r;
  }

  private startShard(model: ModelRecord, plan: Extract<ShardPlan, { kind: 'shard' }>): Replica {
    const hubStage = plan.stages.find((st) => st.node === null);
    const r = this.newReplica(model, null, hubStage?.device ?? 'none');
    const shard: ShardState = { plan, members: [], warnings: [], argv: [], buffers: [] };
    r.shard = shard;
    const log = this.d.log.child({ replica: r.id, model: model.name, shard: true });
    r.loading = (async () => {
      const t0 = this.now();
      try {
        log.info({ stages: plan.stages.map((st) => `${st.node ?? 'hub'}:${st.device} [${st.layers[0]},${st.layers[1]})${st.output ? ' +output' : ''}`) }, 'starting shard');
        let i = 0;
        for (const stage of plan.stages) {
          if (stage.node === null) continue;
          const conn = this.d.nodes?.get(stage.node);
          if (!conn) throw new RelayError(ErrorCode.NODE_LOST, `node ${stage.node} left before its stage started`);
          const member: ShardMember = { stage, conn, rpcId: `${r.id}-${i++}`, bridge: null };
          shard.members.push(member);
          // A node that already holds the GGUF fills ggml-rpc-server's cache from it: then the cold load
          // sends hashes, not tensors over 10 MiB (RELAY_RPC_CACHE_FILL=0 turns this off, for measuring).
          if (conn.cache.has(model.sha256) && process.env.RELAY_RPC_CACHE_FILL !== '0') {
            const filled = await conn.command({ type: 'fill-rpc-cache', sha256: model.sha256 }, 10 * 60_000).catch((err: Error) => {
              log.warn({ node: conn.name, err: err.message }, 'rpc cache fill failed: the load sends the tensors instead');
              return null;
            });
            if (filled) log.info({ node: conn.name, files: filled.data?.files }, 'rpc cache filled from the node\'s copy');
          }
          const info = { model: model.name, index: plan.stages.indexOf(stage), of: plan.stages.length, layers: [stage.layers[0], stage.layers[1]] as [number, number] };
          await conn.command({ type: 'start-rpc', rpc: member.rpcId, cache: true, stage: info, device: stage.device }, 60_000);
          member.bridge = await openRpcBridge(conn, member.rpcId);
        }
        const sm = this.shardModel(model)!;
        const flags = shardFlags(plan, sm, shard.members.map((m) => m.bridge?.endpoint), { outputRemote: process.env.RELAY_EXPERIMENT_OUTPUT_REMOTE === '1' });
        for (const w of flags.warnings) log.warn(w);
        shard.warnings = flags.warnings;
        const server = await startLlamaServer(this.d.install, {
          ...this.serverOptions(model, r),
          name: `llama-server[${model.name} shard]`,
          rpc: flags.rpc,
          devices: flags.devices,
          gpuLayers: flags.gpuLayers,
          tensorSplit: flags.tensorSplit.length > 0 ? flags.tensorSplit : undefined,
          overrides: flags.overrides,
          fit: flags.fit,
        });
        shard.argv = server.argv;
        shard.buffers = loadReport(server).filter((l) => /model buffer size/.test(l));
        // Any RPC failure aborts llama-server (upstream): the shard is failed, the next request re-plans.
        return await this.becomeReady(r, model, server, t0, log, 'the shard head');
      } catch (err) {
        if (r.state === 'starting') this.markFailed(r, (err as Error).message.split('\n')[0] ?? 'shard failed', r.server?.child.tail() ?? '');
        throw new RelayError(ErrorCode.REPLICA_FAILED, `could not start a shard of "${model.name}": ${(err as Error).message}`, { model: model.name });
      }
    })();
    r.loading.catch(() => undefined);
    return r;
  }

  /** Stop a shard's head and its members' rpc-servers (members that are still there). */
  private async teardownShard(r: Replica): Promise<void> {
    const sh = r.shard;
    if (!sh) return;
    await r.server?.child.terminate(5000);
    await Promise.all(sh.members.map(async (m) => {
      await m.bridge?.close();
      if (m.conn.alive) await m.conn.command({ type: 'stop-rpc', rpc: m.rpcId }, 30_000).catch(() => undefined);
    }));
  }

  private startNodeReplica(model: ModelRecord, conn: NodeConn, device: string): Replica {
    const r = this.newReplica(model, conn, device);
    const c = this.d.config;
    r.loading = (async () => {
      const log = this.d.log.child({ replica: r.id, model: model.name, node: conn.name });
      const t0 = this.now();
      try {
        if (!conn.cache.has(model.sha256)) await this.d.nodes!.push(conn, model);
        log.info({ device, need: describeNeed(model.name, r.fit) }, 'starting node replica');
        const reply = await conn.command({
          type: 'start-replica', replica: r.id, sha256: model.sha256, ctx: r.fit.ctx, slots: r.fit.slots, cacheType: c.kvCacheType,
          flashAttn: c.flashAttn ?? null, embedding: model.embedding,
          pooling: poolingFor(model),
          alias: model.name, device,
        }, c.loadTimeoutMs);
        if (r.state !== 'starting') throw new RelayError(ErrorCode.REPLICA_FAILED, `the replica of "${model.name}" was stopped while loading`);
        r.remotePid = typeof reply.data?.pid === 'number' ? reply.data.pid : null;
        r.state = 'ready';
        r.readyAt = this.now();
        this.failures.succeeded(conn.name, model.name);
        r.loading = null;
        const seconds = (this.now() - t0) / 1000;
        this.d.onLoad?.(model.name, seconds);
        log.info({ seconds, pid: r.remotePid }, 'node replica ready');
        if (r.inFlight === 0) this.armIdleTimer(r);
        return r;
      } catch (err) {
        const message = (err as Error).message.split('\n')[0] ?? 'load failed';
        if (r.state === 'starting') this.markFailed(r, message, '');
        // The node's own failure (not its owner pausing it, not the link dropping) keeps M off it for a while.
        const paused = isRelayError(err) && err.code === ErrorCode.MODEL_UNAVAILABLE;
        if (!paused && conn.alive && conn.availability !== 'paused') this.noteNodeFailure(conn.name, model.name, `load failed: ${message}`);
        throw isRelayError(err) && err.code === ErrorCode.MODEL_UNAVAILABLE ? err
          : new RelayError(ErrorCode.REPLICA_FAILED, `could not start a replica of "${model.name}" on node ${conn.name}: ${(err as Error).message}`, { model: model.name, node: conn.name });
      }
    })();
    r.loading.catch(() => undefined);
    return r;
  }

  /** A node went away or paused: its replicas are gone for placement at once; in-flight streams fail. */
  nodeLost(conn: NodeConn, why: string): void {
    for (const r of [...this.replicas.values()]) {
      const member = r.shard?.plan.stages.some((st) => st.node === conn.name) ?? false;
      if (r.node?.name === conn.name || member) this.markFailed(r, `node ${conn.name} ${why}`, '');
    }
  }

  /** A node paused: forget its replicas and tell it to stop them (it must release the card). */
  async nodePaused(conn: NodeConn): Promise<void> {
    // Not a failure: the owner took the machine back. Its placements are stopped and forgotten at once
    // (the node itself terminates its llama-server / rpc-servers within 30 s either way).
    const why = `node ${conn.name} paused (${conn.reason ?? 'by its owner'})`;
    const mine = [...this.replicas.values()].filter((r) => r.node === conn || (r.shard?.plan.stages.some((st) => st.node === conn.name) ?? false));
    await Promise.all(mine.map((r) => this.stopReplica(r, why)));
  }

  /** After a heartbeat: a replica the node no longer runs has failed; one we do not expect is stopped. */
  async reconcile(conn: NodeConn): Promise<void> {
    const reported = new Set(conn.replicas.map((x) => x.replica));
    for (const r of [...this.replicas.values()]) {
      if (r.node === conn && r.state === 'ready' && !reported.has(r.id)) {
        this.markFailed(r, `the replica exited on node ${conn.name}`, '');
        this.noteNodeFailure(conn.name, r.model, 'the replica exited (crashed)');
      }
    }
    for (const x of conn.replicas) {
      const ours = this.replicas.get(x.replica);
      if (!ours || ours.node?.name !== conn.name) {
        this.d.log.info({ node: conn.name, replica: x.replica }, 'node runs a replica the hub does not expect: stopping it');
        await conn.command({ type: 'stop-replica', replica: x.replica }, 35_000).catch(() => undefined);
      }
    }
  }

  private startHostReplica(model: ModelRecord, plan: Extract<HostPlan, { kind: 'host' }>): Replica {
    const r = this.newReplica(model, null, plan.device);
    r.loading = (async () => {
      for (const id of plan.evict) {
        const victim = this.replicas.get(id);
        if (victim) await this.stopReplica(victim, `evicted (least recently used) to make room for "${model.name}"`);
      }
      return this.launch(r, model);
    })();
    r.loading.catch(() => undefined);
    return r;
  }

  private async launch(r: Replica, model: ModelRecord): Promise<Replica> {
    const log = this.d.log.child({ replica: r.id, model: model.name });
    log.info({ device: r.device, need: describeNeed(model.name, r.fit) }, 'starting host replica');
    const t0 = this.now();
    try {
      const server = await startLlamaServer(this.d.install, {
        ...this.serverOptions(model, r),
        name: `llama-server[${model.name}]`,
        embedding: model.embedding,
        pooling: poolingFor(model) ?? undefined,
        ...replicaPlacement(r.device),
      });
      // Crashed later: requests in flight see their socket close; the next request starts a new replica.
      return await this.becomeReady(r, model, server, t0, log, 'llama-server');
    } catch (err) {
      const tail = r.server?.child.tail() ?? ((err as RelayError).details?.tail as string | undefined) ?? '';
      this.markFailed(r, (err as Error).message.split('\n')[0] ?? 'load failed', tail);
      throw new RelayError(ErrorCode.REPLICA_FAILED, `could not start a replica of "${model.name}": ${(err as Error).message}`, { model: model.name });
    }
  }

  /**
   * What every llama-server the hub launches shares (host replicas and shard heads; node replicas get the same
   * values through start-replica): one place, so the KV-cache and flash-attention flags cannot drift.
   */
  private serverOptions(model: ModelRecord, r: Replica) {
    const c = this.d.config;
    return {
      model: model.path, ctx: r.fit.ctx, slots: r.fit.slots, cacheType: c.kvCacheType, flashAttn: c.flashAttn,
      alias: model.name, threads: c.threads, metrics: true, readyTimeoutMs: c.loadTimeoutMs,
    };
  }

  /** A local llama-server (host replica or shard head) answered its health check: serve it, watch it. */
  private async becomeReady(r: Replica, model: ModelRecord, server: RunningLlamaServer, t0: number, log: Logger, what: string): Promise<Replica> {
    r.server = server;
    if (r.state !== 'starting') {
      await server.child.terminate(5000);
      throw new RelayError(ErrorCode.REPLICA_FAILED, `the placement of "${model.name}" was stopped while loading`);
    }
    r.state = 'ready';
    r.readyAt = this.now();
    r.buffers = loadReport(server);
    r.loading = null;
    const seconds = (this.now() - t0) / 1000;
    this.d.onLoad?.(model.name, seconds);
    log.info({ port: server.port, pid: server.child.pid, seconds }, 'ready');
    void server.child.exited.then((info) => {
      if (r.state === 'stopping' || this.closed) return;
      this.markFailed(r, `${what} exited unexpectedly (${describeExit(info)})`, server.child.tail());
    });
    if (r.inFlight === 0) this.armIdleTimer(r);
    return r;
  }

  private noteNodeFailure(node: string, model: string, reason: string): void {
    const b = this.failures.failed(node, model, reason);
    this.d.log.warn({ node, model, reason, failures: b.failures, retry_in_s: Math.round((b.until - b.at) / 1000) }, 'node skipped for this model for a while');
  }

  /** Backoffs in force (for /status and the dashboard). */
  backoffs(): { node: string; model: string; failures: number; reason: string; since: string; until: string }[] {
    return this.failures.active().map((b) => ({
      node: b.node, model: b.model, failures: b.failures, reason: b.reason, since: new Date(b.at).toISOString(), until: new Date(b.until).toISOString(),
    }));
  }

  private markFailed(r: Replica, message: string, tail: string): void {
    if (r.shard) void this.teardownShard(r);
    r.state = 'failed';
    r.loading = null;
    r.failure = { message, tail, at: new Date(this.now()).toISOString() };
    if (r.idleTimer) clearTimeout(r.idleTimer);
    this.replicas.delete(r.id);
    this.failed.set(r.model, r);
    this.d.log.warn({ replica: r.id, model: r.model, message, tail }, 'replica failed');
  }

  private async stopReplica(r: Replica, reason: string): Promise<void> {
    if (r.state === 'stopping') return;
    r.state = 'stopping';
    if (r.idleTimer) clearTimeout(r.idleTimer);
    this.d.log.info({ replica: r.id, model: r.model, node: r.node?.name, reason }, 'stopping replica');
    if (r.shard) await this.teardownShard(r);
    else if (r.node) await r.node.command({ type: 'stop-replica', replica: r.id }, 35_000).catch(() => undefined);
    else await r.server?.child.terminate(10_000);
    this.replicas.delete(r.id);
  }

  async stopModel(name: string, reason: string): Promise<void> {
    await Promise.all([...this.replicas.values()].filter((r) => r.model === name).map((r) => this.stopReplica(r, reason)));
  }

  private placementStatus(r: Replica): PlacementStatus {
    return {
      id: r.id,
      model: r.model,
      state: r.state,
      port: r.server?.port ?? null,
      pid: r.server?.child.pid ?? r.remotePid,
      ctx: r.fit.ctx,
      slots: r.fit.slots,
      kv_cache_type: this.d.config.kvCacheType,
      failure: r.failure,
    };
  }

  shardStatus(): ShardStatus[] {
    const all = [...this.replicas.values(), ...this.failed.values()].filter((r) => r.shard);
    return all.map((r) => {
      const sh = r.shard!;
      let remote = 0;
      return {
        ...this.placementStatus(r),
        stages: sh.plan.stages.map((st, index) => {
          const m = st.node === null ? undefined : sh.members[remote++];
          return {
            index, node: st.node, device: st.device, layers: [st.layers[0], st.layers[1]] as [number, number],
            need_mb: Math.ceil(st.needMb), free_mb: Math.floor(st.freeMb), output: st.output,
            rpc_endpoint: m?.bridge?.endpoint ?? null,
            rpc_bytes: m?.bridge ? m.bridge.bytes.toNode + m.bridge.bytes.fromNode : null,
          };
        }),
        warnings: sh.warnings,
        buffers: sh.buffers,
      };
    });
  }

  status(): ReplicaStatus[] {
    const all = [...this.replicas.values(), ...this.failed.values()].filter((r) => !r.shard);
    return all.map((r) => ({
      ...this.placementStatus(r),
      sha256: r.sha256,
      where: r.node ? 'node' : 'host',
      node: r.node?.name ?? null,
      device: r.device,
      flash_attn: effectiveFlashAttn(this.d.config.kvCacheType, this.d.config.flashAttn),
      need_mb: Math.ceil(r.fit.needMb),
      in_flight: r.inFlight,
      started_at: new Date(r.startedAt).toISOString(),
      last_used_at: new Date(r.lastUsedAt).toISOString(),
      buffers: r.buffers,
    }));
  }

  /** A node's devices with what relay placed there subtracted (a CPU budget is bookkeeping the node cannot see). */
  nodeDevicesFree(node: string, devices: readonly { id: string; kind: 'gpu' | 'cpu'; description: string; totalMb: number; freeMb: number }[]) {
    const free = freeAfterReservations(devices.map((d) => ({ id: d.id, kind: d.kind, totalMb: d.totalMb, reportedFreeMb: d.freeMb })), this.views(node));
    return devices.map((d, i) => ({ ...d, freeMb: Math.floor(free[i]!.freeMb) }));
  }

  /** Devices with what relay reserved on them (for /status). */
  deviceStatus(): { id: string; kind: string; description: string; total_mb: number; free_mb: number; utilization_pct: number | null; source: string; bus_id: string | null }[] {
    const devices = this.d.devices();
    const free = freeAfterReservations(devices, this.views(null));
    return devices.map((d, i) => ({
      id: d.id, kind: d.kind, description: d.description, total_mb: d.totalMb, free_mb: Math.floor(free[i]!.freeMb),
      utilization_pct: d.utilizationPct, source: d.source, bus_id: d.busId,
    }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.replicas.values()].map((r) => this.stopReplica(r, 'hub shutting down')));
  }
}
