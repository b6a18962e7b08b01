import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../../shared/errors.js';
import type { RunningReplica, RunningRpc, SavedSlot, StageInfo, StartReplica } from '../../../../shared/protocol.js';
import type { LlamaInstall } from '../../llama/install.js';
import { draftPlacement, projectorPlacement, replicaPlacement } from '../../llama/argv.js';
import { startLlamaServer, startRpcServer, type RunningLlamaServer, type RunningRpcServer } from '../../llama/processes.js';
import { describeExit, type ManagedChild } from '../../llama/supervisor.js';
import { liveness, type Liveness } from '../../llama/liveness.js';
import type { ModelCache } from '../cache/cache.js';
import { NodeSlots } from './slots.js';
import { CHILD_STOP_GRACE_MS } from '../../timeouts.js';

interface LocalReplica {
  id: string;
  sha256: string;
  /** The cached files it reads (the model's one file, or each part of a split model): in use while it runs. */
  files: readonly string[];
  /** The model's name on the hub (the alias it was started with), for the tray's status line. */
  model: string;
  /** The process from the moment it was spawned (loading), and its server once /health answered (ready). */
  child: ManagedChild | null;
  server: RunningLlamaServer | null;
  stopping: boolean;
  /** Settles once a stop that began has finished (its slots saved, its process gone). */
  stopped: Promise<unknown>;
  /** The bytes of slots it may keep when it stops (the hub's keepSlotsBytes; 0: none), and a token's (its estimate). */
  keepSlotsBytes: number;
  slotBytesPerToken: number | null;
  /** The hub's requests to it in flight (loopback sockets of http streams): closed first when it stops. */
  readonly requests: Set<Socket>;
  /** Settles once the start has (ready, or failed and the process gone). */
  settled: Promise<unknown>;
}

/** A load's deadline when the hub gives none (an older hub): what every load got before the rule. */
const DEFAULT_LOAD_TIMEOUT_MS = 10 * 60_000;

/**
 * What runs on this node for the hub: llama-server replicas and ggml-rpc-servers (shard stages), all on
 * 127.0.0.1. A replica is held from the moment its process is spawned: it is reported (as loading), stopped
 * (a pause, the hub's stop, the hub gone for good) and counted as relay's own while it still loads. Keeps the
 * files they read in use in the cache. Emits 'running' whenever the set changes and 'exited' when a replica
 * ends by itself (the agent tells the hub at once).
 */
export class Workloads extends EventEmitter {
  private readonly replicas = new Map<string, LocalReplica>();
  private readonly rpcs = new Map<string, RunningRpcServer>();
  /** rpc-servers being started, and whether a stop came for one meanwhile. */
  private readonly rpcStarting = new Map<string, { stopped: boolean; settled: Promise<unknown> }>();
  private readonly stages = new Map<string, StageInfo>();

  /** Conversations kept from stopped replicas for the hub (slots.ts). */
  readonly slots: NodeSlots;

  constructor(private readonly deps: { install: LlamaInstall; cache: ModelCache; log: Logger; threads?: number; slotsDir: string }) {
    super();
    this.slots = new NodeSlots({ dir: deps.slotsDir, log: deps.log });
  }

  /** Start (or find) replica `c.replica` of the cached model (every part of a split one must be here). */
  async startReplica(c: StartReplica, nodeName: string): Promise<{ pid: number | undefined; port: number }> {
    const { cache, log } = this.deps;
    const existing = this.replicas.get(c.replica);
    if (existing && !existing.stopping) {
      await existing.settled;
      if (existing.server && !existing.stopping) return { pid: existing.server.child.pid, port: existing.server.port };
      throw new RelayError(ErrorCode.REPLICA_FAILED, `replica ${c.replica} did not start`);
    }
    const files = [...(c.parts ?? [c.sha256]), ...(c.mmproj ? [c.mmproj] : []), ...(c.draft ? [c.draft.sha256] : [])];
    for (const f of files) {
      if (!cache.has(f)) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `node ${nodeName} does not hold ${f.slice(0, 12)}…`);
    }
    for (const f of files) {
      cache.inUse.add(f);
      cache.touch(f);
    }
    const keepSlotsBytes = c.keepSlotsBytes ?? 0;
    const slotBytesPerToken = c.slotBytesPerToken ?? null;
    const rep: LocalReplica = {
      id: c.replica,
      sha256: c.sha256,
      files,
      model: c.alias,
      child: null,
      server: null,
      stopping: false,
      stopped: Promise.resolve(),
      keepSlotsBytes,
      slotBytesPerToken,
      requests: new Set(),
      settled: Promise.resolve(),
    };
    this.replicas.set(c.replica, rep);
    this.emit('running');
    const started = (async () => {
      try {
        const server = await startLlamaServer(this.deps.install, {
          name: `llama-server[${c.alias}]`,
          model: c.parts ? cache.splitView(c.sha256, c.parts) : cache.pathOf(c.sha256),
          ctx: c.ctx,
          slots: c.slots,
          cacheType: c.cacheType,
          flashAttn: c.flashAttn ?? undefined,
          alias: c.alias,
          embedding: c.embedding,
          reranking: c.reranking ?? false,
          pooling: c.pooling ?? undefined,
          nPredict: c.nPredict,
          spec: c.specType,
          ...projectorPlacement(c.mmproj === undefined ? undefined : cache.pathOf(c.mmproj), c.device),
          ...draftPlacement(c.draft ? { path: cache.pathOf(c.draft.sha256), max: c.draft.max, min: c.draft.min } : null, c.device, this.deps.install.backend),
          metrics: true,
          ...(keepSlotsBytes > 0 ? { slotSavePath: this.slots.savePath } : {}),
          threads: this.deps.threads,
          readyTimeoutMs: c.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS,
          ...replicaPlacement(c.device, this.deps.install.backend),
          onSpawn: (child) => {
            rep.child = child;
            if (rep.stopping) void child.terminate(CHILD_STOP_GRACE_MS); // stopped before it even spawned
          },
        });
        if (rep.stopping) {
          await server.child.terminate(CHILD_STOP_GRACE_MS);
          throw new RelayError(ErrorCode.REPLICA_FAILED, `replica ${c.replica} was stopped while it loaded`);
        }
        rep.server = server;
        this.emit('running');
        void server.child.exited.then((info) => {
          if (this.replicas.get(c.replica) === rep) {
            this.replicas.delete(c.replica);
            this.emit('running');
          }
          this.release(files);
          if (!rep.stopping) log.warn({ replica: c.replica, exit: describeExit(info) }, 'replica exited');
          this.emit('exited');
        });
        log.info({ replica: c.replica, model: c.alias, port: server.port, pid: server.child.pid }, 'replica started');
        return { pid: server.child.pid, port: server.port };
      } catch (err) {
        if (this.replicas.get(c.replica) === rep) {
          this.replicas.delete(c.replica);
          this.emit('running');
        }
        this.release(files);
        if (rep.stopping && !isRelayError(err, ErrorCode.REPLICA_FAILED)) throw new RelayError(ErrorCode.REPLICA_FAILED, `replica ${c.replica} was stopped while it loaded`);
        throw err;
      }
    })();
    rep.settled = started.catch(() => undefined);
    return started;
  }

  /** Files no running replica reads any more may be evicted again. */
  private release(files: readonly string[]): void {
    const used = new Set([...this.replicas.values()].filter((r) => !r.stopping).flatMap((r) => r.files));
    for (const f of files) if (!used.has(f)) this.deps.cache.inUse.delete(f);
    this.deps.cache.retryEvictions(); // an eviction the hub asked for while they ran
  }

  /**
   * Stop a replica, loading or ready: resolves once its process has exited, with the slots it kept for the hub
   * (also when the owner's pause stopped it before the hub asked).
   */
  async stopReplica(id: string, why: string): Promise<SavedSlot[]> {
    const r = this.replicas.get(id);
    if (r?.stopping) await r.stopped;
    if (!r || r.stopping) return this.slots.list(id);
    r.stopping = true;
    r.stopped = this.stopNow(r, why);
    await r.stopped;
    return this.slots.list(id);
  }

  private async stopNow(r: LocalReplica, why: string): Promise<void> {
    const id = r.id;
    this.deps.log.info({ replica: id, why, loading: r.server === null, requests: r.requests.size }, 'stopping replica');
    // Its requests end now: llama-server stops generating at SIGTERM but holds an open connection until it is killed.
    for (const sock of r.requests) sock.destroy();
    // Its conversations, saved before the process goes (the hub fetches them: slots.ts).
    if (r.server && r.keepSlotsBytes > 0) await this.slots.save(id, r.server.baseUrl, r.keepSlotsBytes, r.slotBytesPerToken);
    if (r.child) {
      const exit = await r.child.terminate(CHILD_STOP_GRACE_MS);
      this.deps.log.info({ replica: id, exit: describeExit(exit) }, 'replica stopped');
    }
    this.slots.sweep(id); // a save cut short by its deadline may have left a file
    await r.settled; // a start still under way ends (its process gone) before this answers
    if (this.replicas.get(id) === r) this.replicas.delete(id);
    this.emit('running');
    this.release(r.files);
  }

  async startRpc(id: string, cache: boolean, stage?: StageInfo, device?: string): Promise<RunningRpcServer> {
    const existing = this.rpcs.get(id);
    if (existing) return existing;
    const starting = { stopped: false, settled: Promise.resolve() as Promise<unknown> };
    this.rpcStarting.set(id, starting);
    this.deps.cache.rpcLoading.add(id); // its load may save weights to the cache: nothing is pruned until rpc-loaded
    const started = (async () => {
      try {
        // LLAMA_CACHE=<cache>/llama: ggml-rpc-server's tensor cache is <cache>/llama/rpc, inside the node's budget.
        // One rpc-server per stage, pinned to the stage's device (-d): two stages on this node use two devices.
        const r = await startRpcServer(this.deps.install, { cache, cacheDir: join(this.deps.cache.root, 'llama'), name: `ggml-rpc-server[${id}]`, device, threads: this.deps.threads });
        if (starting.stopped) {
          await r.child.terminate(CHILD_STOP_GRACE_MS);
          throw new RelayError(ErrorCode.REPLICA_FAILED, `rpc-server ${id} was stopped while it started`);
        }
        this.rpcs.set(id, r);
        if (stage) this.stages.set(id, stage);
        this.emit('running');
        void r.child.exited.then(() => {
          if (this.rpcs.get(id) === r) this.forgetRpc(id);
        });
        return r;
      } catch (err) {
        this.deps.cache.rpcLoading.delete(id);
        throw err;
      } finally {
        this.rpcStarting.delete(id);
      }
    })();
    starting.settled = started.catch(() => undefined);
    return started;
  }

  async stopRpc(id: string): Promise<void> {
    const starting = this.rpcStarting.get(id);
    if (starting) {
      starting.stopped = true;
      await starting.settled;
    }
    const r = this.rpcs.get(id);
    if (!r) return;
    this.forgetRpc(id);
    await r.child.terminate(CHILD_STOP_GRACE_MS);
  }

  /** An rpc-server stopped or gone: no longer served, nor loading (the cache may be pruned again). */
  private forgetRpc(id: string): void {
    this.rpcs.delete(id);
    this.stages.delete(id);
    this.deps.cache.rpcLoading.delete(id);
    this.emit('running');
  }

  /** Stop everything (paused, the hub gone for good, shutting down). */
  async stopAll(why: string): Promise<void> {
    await Promise.all([...this.replicas.keys()].map((id) => this.stopReplica(id, why)));
    await Promise.all([...this.rpcs.keys()].map((id) => this.stopRpc(id)));
  }

  /**
   * Whether a replica or rpc-server can still answer (llama/liveness.ts): the hub asks when a request through it
   * has heard nothing for a while and the node itself answers pings.
   */
  async check(c: { replica?: string | undefined; rpc?: string | undefined }): Promise<Liveness> {
    if (c.replica !== undefined) {
      const r = this.replicas.get(c.replica);
      if (!r || r.stopping) return 'gone';
      return liveness(r.child, r.server ? `${r.server.baseUrl}/health` : null);
    }
    if (c.rpc !== undefined) {
      const r = this.rpcs.get(c.rpc);
      return r ? liveness(r.child, null) : this.rpcStarting.has(c.rpc) ? 'ok' : 'gone';
    }
    return 'gone';
  }

  /** A request to a replica here is in flight on `sock` until it closes (stopReplica closes it first). */
  track(replica: string, sock: Socket): void {
    const r = this.replicas.get(replica);
    if (!r) return;
    if (r.stopping) return void sock.destroy(); // it stops: a request that comes now would wait for its kill
    r.requests.add(sock);
    sock.once('close', () => r.requests.delete(sock));
  }

  /** A running (ready) replica's llama-server on loopback, for a slot put. */
  baseUrlOf(replica: string): string | undefined {
    const r = this.replicas.get(replica);
    return r && !r.stopping ? r.server?.baseUrl : undefined;
  }

  /** The loopback port a tunnel stream of this kind goes to, if that replica (ready) or rpc-server runs here. */
  portFor(h: { kind: 'control' } | { kind: 'http'; replica: string } | { kind: 'rpc'; rpc: string }): number | undefined {
    return h.kind === 'http' ? this.replicas.get(h.replica)?.server?.port : h.kind === 'rpc' ? this.rpcs.get(h.rpc)?.port : undefined;
  }

  /** What the hub is told runs here (hello, heartbeat). */
  reported(): RunningReplica[] {
    return [...this.replicas.values()]
      .filter((r) => !r.stopping)
      .map((r) => ({ replica: r.id, sha256: r.sha256, pid: r.child?.pid ?? null, state: r.server ? ('ready' as const) : ('loading' as const) }));
  }

  /** The rpc-servers running here (hello, heartbeat): the hub stops one it no longer expects. */
  reportedRpcs(): RunningRpc[] {
    return [...this.rpcs].map(([rpc, r]) => ({ rpc, pid: r.child.pid ?? null }));
  }

  /** What runs here now (the tray's status line, the local API's /status): replicas, and the shard stages this node's ggml-rpc-servers serve. */
  running(): { replicas: { replica: string; model: string }[]; stages: StageInfo[] } {
    return {
      replicas: [...this.replicas.values()].filter((r) => !r.stopping).map((r) => ({ replica: r.id, model: r.model })),
      stages: [...this.stages.values()],
    };
  }
}
