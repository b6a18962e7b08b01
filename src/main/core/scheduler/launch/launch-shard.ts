import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../../shared/errors.js';
import type { CommandBody } from '../../../../shared/protocol.js';
import type { HubConfig } from '../../config.js';
import type { LlamaInstall } from '../../llama/install.js';
import { projectorPlacement } from '../../llama/argv.js';
import { startLlamaServer } from '../../llama/processes.js';
import type { ManagedChild } from '../../llama/supervisor.js';
import { asLiveness, liveness, worst, type Liveness } from '../../llama/liveness.js';
import { CHECK_WAIT_MS } from './launch-node.js';
import type { NodeConn, NodeManager } from '../../pool/manager.js';
import { openRpcBridge, type RpcBridge } from '../../pool/rpc-bridge.js';
import { modelFiles } from '../../models/files.js';
import { StageWeights } from '../../llama/rpc-weights.js';
import type { ModelRecord } from '../../store/store.js';
import { loadReport, localRunning, serverOptions } from './launch-host.js';
import type { Placement, Running } from '../placements/placement.js';
import { shardModel, type Stage } from '../decide/shard.js';
import { shardFlags } from '../decide/shard-flags.js';

/** A shard head gets less time than a host replica to exit: its stages' servers go down right after it. */
const HEAD_STOP_GRACE_MS = 5000;
const START_RPC_TIMEOUT_MS = 60_000;
const STOP_RPC_TIMEOUT_MS = 30_000;

export interface ShardInfo {
  readonly members: readonly { node: string; endpoint: string | null; bytes: number | null; roundTrips: number | null; waitMs: number | null }[];
  readonly warnings: readonly string[];
  readonly buffers: readonly string[];
}

/** One remote stage: a ggml-rpc-server on a node, bridged to a local port the head dials. */
interface Member {
  stage: Stage;
  conn: NodeConn;
  rpcId: string;
  bridge: RpcBridge | null;
}

interface Held {
  /** The head's process from its spawn (still loading included): a stop kills it. */
  head: ManagedChild | null;
  headUrl: string | null;
  /** Members whose start-rpc was sent and answered (or failed): the ones a stop must stop. */
  members: Member[];
  warnings: string[];
  buffers: string[];
  /** stop() came: start() tears down each piece it gets from now on and gives up. */
  stopped: boolean;
}

/**
 * Shards: a ggml-rpc-server per remote stage on its node (its cache filled from the node's copy of the GGUF
 * when it has one), each bridged to a local port, then the head llama-server on the hub driving them all.
 * A stop while the shard is still starting stops the members that exist; start() then stops each piece that
 * comes up after it (a member whose start-rpc was in flight, a bridge, the head) and rejects.
 */
export class ShardLauncher {
  private readonly held = new Map<string, Held>();
  /** rpc-server ids the hub expects on each node, from before their start-rpc is sent until their stage is stopped. */
  private readonly expected = new Map<string, Set<string>>();

  /** The weight files each remote stage's load leaves, named from the hub's copy (llama/rpc-weights.ts). */
  private readonly weights = new StageWeights();

  constructor(private readonly deps: { config: HubConfig; install: LlamaInstall; nodes: NodeManager | undefined; log: Logger }) {}

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    const plan = p.shardPlan!;
    const h: Held = { head: null, headUrl: null, members: [], warnings: [], buffers: [], stopped: false };
    this.held.set(p.id, h);
    const log = this.deps.log.child({ placement: p.id, model: model.name, shard: true });
    // After each step that waits: a stop that came meanwhile gets what the step made stopped too.
    const unlessStopped = async (): Promise<void> => {
      if (!h.stopped) return;
      await this.teardown(h);
      throw new RelayError(ErrorCode.REPLICA_FAILED, 'the shard was stopped while it started');
    };
    try {
      log.info({ stages: plan.stages.map((st) => `${st.node ?? 'hub'}:${st.device} [${st.layers[0]},${st.layers[1]})${st.output ? ' +output' : ''}`) }, 'starting shard');
      // Each remote stage's weight files, named from the hub's copy while the stages start and the head loads.
      const weights = new Map(plan.stages.filter((st) => st.node !== null).map((st) => [st, this.weights.of(modelFiles(model), st.layers)] as const));
      for (const w of weights.values()) w.catch(() => undefined);
      let i = 0;
      for (const stage of plan.stages) {
        if (stage.node === null) continue;
        const conn = this.deps.nodes?.get(stage.node);
        if (!conn) throw new RelayError(ErrorCode.NODE_LOST, `node ${stage.node} left before its stage started`);
        const member: Member = { stage, conn, rpcId: `${p.id}-${i++}`, bridge: null };
        await this.fillRpcCache(conn, model, stage, p.deadlineMs, log, () => h.stopped);
        await unlessStopped();
        if (!conn.alive) throw new RelayError(ErrorCode.NODE_LOST, `node ${conn.name} went away while its stage was prepared`, { node: conn.name });
        const info = { model: model.name, index: plan.stages.indexOf(stage), of: plan.stages.length, layers: [stage.layers[0], stage.layers[1]] as [number, number] };
        try {
          try {
            this.expect(conn.name, member.rpcId, true); // before it can appear in a report
            await conn.command({ type: 'start-rpc', rpc: member.rpcId, cache: true, stage: info, device: stage.device }, START_RPC_TIMEOUT_MS);
          } finally {
            // Answered or not, the node may run it now: a stop sends stop-rpc for it.
            h.members.push(member);
          }
          await unlessStopped();
          // Only the head this shard starts below may connect to the bridge (not another local user).
          member.bridge = await openRpcBridge(conn, member.rpcId, () => (h.head?.running ? (h.head.pid ?? null) : null), log);
          await unlessStopped();
        } catch (err) {
          // The stage's node itself failed (not the head): name it, so failure memory keeps M off it a while. A node
          // that went away (its link, its sleep) is no failure of the node.
          if (h.stopped || isRelayError(err, ErrorCode.NODE_LOST) || isRelayError(err, ErrorCode.MODEL_UNAVAILABLE)) throw err;
          if (!conn.alive) throw new RelayError(ErrorCode.NODE_LOST, `node ${conn.name} went away while its stage started`, { node: conn.name });
          throw new RelayError(ErrorCode.REPLICA_FAILED, `stage ${info.index + 1} of ${info.of} on node ${conn.name}: ${(err as Error).message}`, { node: conn.name });
        }
      }
      const flags = shardFlags(
        plan,
        shardModel(model)!,
        h.members.map((m) => m.bridge?.endpoint),
        { outputRemote: this.deps.config.experimentOutputRemote },
      );
      for (const w of flags.warnings) log.warn(w);
      h.warnings = flags.warnings;
      const head = await startLlamaServer(this.deps.install, {
        ...serverOptions(this.deps.config, model, p),
        name: `llama-server[${model.name} shard]`,
        rpc: flags.rpc,
        devices: flags.devices,
        gpuLayers: flags.gpuLayers,
        tensorSplit: flags.tensorSplit.length > 0 ? flags.tensorSplit : undefined,
        overrides: flags.overrides,
        fit: flags.fit,
        // A vision model's projector runs beside the head, on the hub's stage device (its fit counts it there).
        ...projectorPlacement(model.mmproj?.path, plan.stages.find((st) => st.node === null)?.device ?? 'CPU'),
        onSpawn: (child) => {
          h.head = child;
          p.loadingSince = Date.now();
          p.loadingPid = child.pid ?? null;
          if (h.stopped) void child.terminate(HEAD_STOP_GRACE_MS);
        },
      });
      h.headUrl = head.baseUrl;
      await unlessStopped();
      // Where the weights went, and what flash attention resolved to (the fit reads it: placer.ts).
      h.buffers = loadReport(head).filter((l) => /model buffer size|Flash Attention/.test(l));
      for (const m of h.members) m.bridge?.resetWaits(); // the load's round trips are no stage's speed
      // Loaded: what each stage's rpc-server saved to its cache so far are weights; later saves are not (rpc-cache.ts).
      // Told before the first request, whose activations would otherwise be named weights too.
      await Promise.all(
        h.members.map(async (m) => {
          const named = await weights.get(m.stage)!.catch((err: Error) => {
            log.warn({ node: m.conn.name, message: err.message }, "could not name the stage's weight files: the node keeps none of what its load saved");
            return [];
          });
          await m.conn.command({ type: 'rpc-loaded', rpc: m.rpcId, sha256: model.sha256, weights: named.map((w) => ({ name: w.name, size: w.size })) }, START_RPC_TIMEOUT_MS).catch(() => undefined);
        }),
      );
      // Any RPC failure aborts llama-server (upstream): the shard is failed, the next request re-plans.
      return localRunning(head, 'the shard head');
    } catch (err) {
      const tail = ((err as RelayError).details?.tail as string | undefined) ?? '';
      throw new RelayError(isRelayError(err, ErrorCode.NODE_LOST) ? ErrorCode.NODE_LOST : ErrorCode.REPLICA_FAILED, `could not start a shard of "${model.name}": ${(err as Error).message}`, {
        model: model.name,
        tail,
        node: (err as RelayError).details?.node,
      });
    }
  }

  /**
   * A node that already holds the GGUF fills ggml-rpc-server's cache from it: then the cold load sends hashes,
   * not tensors over 10 MiB (HubConfig.rpcCacheFill, RELAY_RPC_CACHE_FILL=0, turns this off, for measuring).
   * A split model's parts are GGUFs of their own: each part the node holds fills the stage's tensors it has.
   */
  private async fillRpcCache(conn: NodeConn, model: ModelRecord, stage: Stage, timeoutMs: number, log: Logger, stopped: () => boolean): Promise<void> {
    if (!this.deps.config.rpcCacheFill) return;
    const files = modelFiles(model);
    for (const file of files.filter((f) => conn.cache.has(f.sha256))) {
      if (stopped()) return; // a stop came during the last part's fill: the rest would be for nothing
      const siblings = files.filter((f) => f !== file).map((f) => f.sha256);
      const command: CommandBody = { type: 'fill-rpc-cache', sha256: file.sha256, layers: [stage.layers[0], stage.layers[1]], ...(siblings.length > 0 ? { siblings } : {}) };
      // Filling reads the stage's tensors from the node's copy: the load's own deadline rule bounds it.
      const filled = await conn.command(command, timeoutMs).catch((err: Error) => {
        log.warn({ node: conn.name, file: file.sha256, err: err.message }, 'rpc cache fill failed: the load sends the tensors instead');
        return null;
      });
      if (filled) log.info({ node: conn.name, file: file.sha256, files: filled.data?.files }, "rpc cache filled from the node's copy");
    }
  }

  async stop(p: Placement): Promise<void> {
    const h = this.held.get(p.id);
    this.held.delete(p.id);
    if (!h) return;
    h.stopped = true;
    await this.teardown(h);
  }

  /** Stops the head and the members held now and forgets them (what comes up later is start()'s to stop). */
  private async teardown(h: Held): Promise<void> {
    const head = h.head;
    h.head = null;
    const members = h.members.splice(0);
    await head?.terminate(HEAD_STOP_GRACE_MS);
    await Promise.all(
      members.map(async (m) => {
        await m.bridge?.close();
        // A member whose node is away now is stopped when it reconnects: it reports an rpc-server no longer expected.
        this.expect(m.conn.name, m.rpcId, false);
        if (m.conn.alive) await m.conn.command({ type: 'stop-rpc', rpc: m.rpcId }, STOP_RPC_TIMEOUT_MS).catch(() => undefined);
      }),
    );
  }

  private expect(node: string, rpcId: string, yes: boolean): void {
    const ids = this.expected.get(node) ?? new Set<string>();
    if (yes) ids.add(rpcId);
    else ids.delete(rpcId);
    if (ids.size > 0) this.expected.set(node, ids);
    else this.expected.delete(node);
  }

  /** Whether the hub expects this rpc-server on this node (a stage of a shard that is starting or running). */
  expects(node: string, rpcId: string): boolean {
    return this.expected.get(node)?.has(rpcId) ?? false;
  }

  /** The head (locally) and every member's rpc-server (each node's own answer): the worst of them. */
  async check(p: Placement): Promise<Liveness> {
    const h = this.held.get(p.id);
    if (!h) return 'gone';
    const head = liveness(h.head, h.headUrl ? `${h.headUrl}/health` : null);
    const members = h.members.map((m) =>
      m.conn.alive
        ? m.conn.command({ type: 'check', rpc: m.rpcId }, CHECK_WAIT_MS).then(
            (r) => asLiveness(r.data?.liveness),
            () => 'ok' as const,
          )
        : Promise.resolve('gone' as const),
    );
    return worst(await Promise.all([head, ...members]));
  }

  info(p: Placement): ShardInfo | null {
    const h = this.held.get(p.id);
    if (!h) return null;
    return {
      members: h.members.map((m) => ({
        node: m.conn.name,
        endpoint: m.bridge?.endpoint ?? null,
        bytes: m.bridge ? m.bridge.bytes.toNode + m.bridge.bytes.fromNode : null,
        roundTrips: m.bridge?.bytes.roundTrips ?? null,
        waitMs: m.bridge?.medianWaitMs() ?? null,
      })),
      warnings: h.warnings,
      buffers: h.buffers,
    };
  }
}
