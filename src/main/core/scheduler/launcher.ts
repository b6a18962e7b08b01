import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import { replicaPlacement } from '../llama/argv.js';
import type { LlamaInstall } from '../llama/install.js';
import { startLlamaServer, type RunningLlamaServer } from '../llama/processes.js';
import { describeExit } from '../llama/supervisor.js';
import type { NodeManager, NodeConn } from '../pool/manager.js';
import { openRpcBridge, type RpcBridge } from '../pool/rpc-bridge.js';
import type { ModelRecord } from '../store/store.js';
import { describeNeed } from './plan.js';
import type { Placement, Running } from './placement.js';
import { shardFlags, type ShardModel, type Stage } from './shard.js';
import { settingsFor } from './model-settings.js';
import { cachedIn, modelFiles } from '../models/files.js';
import { STOP_REPLICA_WAIT_MS } from '../timeouts.js';

/**
 * The launcher makes a planned placement real and takes it down again: a host replica is a local
 * llama-server; a node replica is pushed (when the node lacks the file) and started by command; a shard is
 * ggml-rpc-servers on its member nodes, bridged to local ports, driven by a head llama-server on the hub.
 * The scheduler decides; the launcher only acts, so the scheduler's rules are tested with a launcher of
 * the tests' own.
 */
export interface Launcher {
  /** Resolves when the placement answers; rejects with a RelayError (REPLICA_FAILED, NODE_LOST, MODEL_UNAVAILABLE). */
  start(p: Placement, model: ModelRecord): Promise<Running>;
  /** Stops whatever the placement holds (also while it is still starting); never rejects. */
  stop(p: Placement): Promise<void>;
  /** A shard's live members, for /status. */
  shardInfo(p: Placement): ShardInfo | null;
}

export interface ShardInfo {
  readonly members: readonly { node: string; endpoint: string | null; bytes: number | null; roundTrips: number | null }[];
  readonly warnings: readonly string[];
  readonly buffers: readonly string[];
}

interface ShardMember {
  stage: Stage;
  conn: NodeConn;
  rpcId: string;
  bridge: RpcBridge | null;
}

interface Held {
  server: RunningLlamaServer | null;
  members: ShardMember[];
  warnings: string[];
  buffers: string[];
}

/** llama-server's lines that say where weights and KV landed, as `<buffer type> model|KV buffer size = N MiB`. */
function loadReport(server: RunningLlamaServer): string[] {
  return server.child
    .output()
    .filter((l) => /(model|KV) buffer size/.test(l))
    .map((l) => l.replace(/^.*?(load_tensors|llama_kv_cache\w*):\s*/, '').trim());
}

/** OpenAI-style embeddings need a pooled vector: a header without a pooling type gets mean pooling. */
export function poolingFor(model: ModelRecord): 'mean' | null {
  return model.embedding && (model.pooling_type === null || model.pooling_type === undefined) ? 'mean' : null;
}

/** The split planner's view of a model (null: the header gives no layer count to split). */
export function shardModel(model: ModelRecord): ShardModel | null {
  if (!model.block_count) return null;
  const weightsMb = model.required_vram_mb ?? model.size / (1024 * 1024);
  return {
    name: model.name,
    blockCount: model.block_count,
    weightsMb,
    kvBytesPerToken: model.kv_bytes_per_token,
    isMoe: model.expert_count > 0 && model.expert_used_count > 0,
    // The experts' share of the weights, scaled like the weights themselves (required_vram_mb or the file).
    expertWeightsMb: model.expert_bytes != null && model.tensor_bytes ? weightsMb * (model.expert_bytes / model.tensor_bytes) : null,
  };
}

export class LlamaLauncher implements Launcher {
  private readonly held = new Map<string, Held>();

  constructor(private readonly deps: { config: HubConfig; install: LlamaInstall; nodes?: NodeManager; log: Logger }) {}

  private hold(p: Placement): Held {
    let h = this.held.get(p.id);
    if (!h) this.held.set(p.id, (h = { server: null, members: [], warnings: [], buffers: [] }));
    return h;
  }

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    if (p.kind === 'node') return this.startNode(p, model);
    if (p.kind === 'shard') return this.startShard(p, model);
    return this.startHost(p, model);
  }

  /**
   * What every llama-server the hub launches shares (host replicas and shard heads; node replicas get the same
   * values through start-replica): one place, so the KV-cache and flash-attention flags cannot drift.
   */
  private serverOptions(model: ModelRecord, p: Placement) {
    const c = settingsFor(this.deps.config, model);
    return {
      model: model.path,
      ctx: p.fit.ctx,
      slots: p.fit.slots,
      cacheType: c.kvCacheType,
      flashAttn: c.flashAttn,
      alias: model.name,
      threads: c.threads,
      metrics: true,
      readyTimeoutMs: c.loadTimeoutMs,
    };
  }

  private local(server: RunningLlamaServer, what: string): Running {
    return {
      baseUrl: server.baseUrl,
      port: server.port,
      pid: server.child.pid ?? null,
      buffers: loadReport(server),
      exited: server.child.exited.then((info) => `${what} exited unexpectedly (${describeExit(info)})`),
      tail: () => server.child.tail(),
    };
  }

  private async startHost(p: Placement, model: ModelRecord): Promise<Running> {
    const log = this.deps.log.child({ placement: p.id, model: model.name });
    log.info({ device: p.device, need: describeNeed(model.name, p.fit) }, 'starting host replica');
    try {
      const server = await startLlamaServer(this.deps.install, {
        ...this.serverOptions(model, p),
        name: `llama-server[${model.name}]`,
        embedding: model.embedding,
        pooling: poolingFor(model) ?? undefined,
        ...replicaPlacement(p.device, this.deps.install.backend),
      });
      this.hold(p).server = server;
      return this.local(server, 'llama-server');
    } catch (err) {
      const tail = ((err as RelayError).details?.tail as string | undefined) ?? '';
      throw new RelayError(ErrorCode.REPLICA_FAILED, `could not start a replica of "${model.name}": ${(err as Error).message}`, { model: model.name, tail });
    }
  }

  private async startNode(p: Placement, model: ModelRecord): Promise<Running> {
    const conn = p.node!;
    const c = settingsFor(this.deps.config, model);
    const log = this.deps.log.child({ placement: p.id, model: model.name, node: conn.name });
    try {
      if (!cachedIn(conn.cache, model)) await this.deps.nodes!.push(conn, model);
      log.info({ device: p.device, need: describeNeed(model.name, p.fit) }, 'starting node replica');
      const files = modelFiles(model);
      const reply = await conn.command(
        {
          type: 'start-replica',
          replica: p.id,
          sha256: model.sha256,
          ...(files.length > 1 ? { parts: files.map((f) => f.sha256) } : {}),
          ctx: p.fit.ctx,
          slots: p.fit.slots,
          cacheType: c.kvCacheType,
          flashAttn: c.flashAttn ?? null,
          embedding: model.embedding,
          pooling: poolingFor(model),
          alias: model.name,
          device: p.device,
        },
        c.loadTimeoutMs,
      );
      const pid = typeof reply.data?.pid === 'number' ? reply.data.pid : null;
      return { baseUrl: `http://${conn.name}.node.relay`, connect: () => conn.open({ kind: 'http', replica: p.id }), port: null, pid, buffers: [], exited: null, tail: () => '' };
    } catch (err) {
      if (isRelayError(err) && (err.code === ErrorCode.MODEL_UNAVAILABLE || err.code === ErrorCode.NODE_LOST)) throw err;
      throw new RelayError(ErrorCode.REPLICA_FAILED, `could not start a replica of "${model.name}" on node ${conn.name}: ${(err as Error).message}`, { model: model.name, node: conn.name });
    }
  }

  private async startShard(p: Placement, model: ModelRecord): Promise<Running> {
    const plan = p.shardPlan!;
    const h = this.hold(p);
    const log = this.deps.log.child({ placement: p.id, model: model.name, shard: true });
    try {
      log.info({ stages: plan.stages.map((st) => `${st.node ?? 'hub'}:${st.device} [${st.layers[0]},${st.layers[1]})${st.output ? ' +output' : ''}`) }, 'starting shard');
      let i = 0;
      for (const stage of plan.stages) {
        if (stage.node === null) continue;
        const conn = this.deps.nodes?.get(stage.node);
        if (!conn) throw new RelayError(ErrorCode.NODE_LOST, `node ${stage.node} left before its stage started`);
        const member: ShardMember = { stage, conn, rpcId: `${p.id}-${i++}`, bridge: null };
        h.members.push(member);
        // A node that already holds the GGUF fills ggml-rpc-server's cache from it: then the cold load
        // sends hashes, not tensors over 10 MiB (RELAY_RPC_CACHE_FILL=0 turns this off, for measuring).
        // A split model's parts are not read for the fill yet: its stages load by sending the tensors.
        if (!model.parts && conn.cache.has(model.sha256) && process.env.RELAY_RPC_CACHE_FILL !== '0') {
          const filled = await conn.command({ type: 'fill-rpc-cache', sha256: model.sha256, layers: [stage.layers[0], stage.layers[1]] }, 10 * 60_000).catch((err: Error) => {
            log.warn({ node: conn.name, err: err.message }, 'rpc cache fill failed: the load sends the tensors instead');
            return null;
          });
          if (filled) log.info({ node: conn.name, files: filled.data?.files }, "rpc cache filled from the node's copy");
        }
        const info = { model: model.name, index: plan.stages.indexOf(stage), of: plan.stages.length, layers: [stage.layers[0], stage.layers[1]] as [number, number] };
        try {
          await conn.command({ type: 'start-rpc', rpc: member.rpcId, cache: true, stage: info, device: stage.device }, 60_000);
          member.bridge = await openRpcBridge(conn, member.rpcId);
        } catch (err) {
          // The stage's node itself failed (not the head): name it, so failure memory keeps M off it a while.
          if (isRelayError(err, ErrorCode.NODE_LOST) || isRelayError(err, ErrorCode.MODEL_UNAVAILABLE)) throw err;
          throw new RelayError(ErrorCode.REPLICA_FAILED, `stage ${info.index + 1} of ${info.of} on node ${conn.name}: ${(err as Error).message}`, { node: conn.name });
        }
      }
      const sm = shardModel(model)!;
      const flags = shardFlags(
        plan,
        sm,
        h.members.map((m) => m.bridge?.endpoint),
        { outputRemote: process.env.RELAY_EXPERIMENT_OUTPUT_REMOTE === '1' },
      );
      for (const w of flags.warnings) log.warn(w);
      h.warnings = flags.warnings;
      const server = await startLlamaServer(this.deps.install, {
        ...this.serverOptions(model, p),
        name: `llama-server[${model.name} shard]`,
        rpc: flags.rpc,
        devices: flags.devices,
        gpuLayers: flags.gpuLayers,
        tensorSplit: flags.tensorSplit.length > 0 ? flags.tensorSplit : undefined,
        overrides: flags.overrides,
        fit: flags.fit,
      });
      h.server = server;
      h.buffers = loadReport(server).filter((l) => /model buffer size/.test(l));
      // Any RPC failure aborts llama-server (upstream): the shard is failed, the next request re-plans.
      return this.local(server, 'the shard head');
    } catch (err) {
      const tail = ((err as RelayError).details?.tail as string | undefined) ?? '';
      throw new RelayError(isRelayError(err, ErrorCode.NODE_LOST) ? ErrorCode.NODE_LOST : ErrorCode.REPLICA_FAILED, `could not start a shard of "${model.name}": ${(err as Error).message}`, {
        model: model.name,
        tail,
        node: (err as RelayError).details?.node,
      });
    }
  }

  async stop(p: Placement): Promise<void> {
    const h = this.held.get(p.id);
    this.held.delete(p.id);
    if (p.kind === 'node') {
      if (p.node?.alive) await p.node.command({ type: 'stop-replica', replica: p.id }, STOP_REPLICA_WAIT_MS).catch(() => undefined);
      return;
    }
    if (!h) return;
    await h.server?.child.terminate(p.kind === 'shard' ? 5000 : 10_000);
    await Promise.all(
      h.members.map(async (m) => {
        await m.bridge?.close();
        if (m.conn.alive) await m.conn.command({ type: 'stop-rpc', rpc: m.rpcId }, 30_000).catch(() => undefined);
      }),
    );
  }

  shardInfo(p: Placement): ShardInfo | null {
    const h = this.held.get(p.id);
    if (!h || p.kind !== 'shard') return null;
    return {
      members: h.members.map((m) => ({
        node: m.conn.name,
        endpoint: m.bridge?.endpoint ?? null,
        bytes: m.bridge ? m.bridge.bytes.toNode + m.bridge.bytes.fromNode : null,
        roundTrips: m.bridge?.bytes.roundTrips ?? null,
      })),
      warnings: h.warnings,
      buffers: h.buffers,
    };
  }
}
