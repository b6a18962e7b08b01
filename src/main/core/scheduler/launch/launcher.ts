import type { Logger } from 'pino';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { HubConfig } from '../../config.js';
import type { LlamaInstall } from '../../llama/install.js';
import type { NodeManager } from '../../pool/manager.js';
import type { ModelRecord } from '../../store/store.js';
import { join } from 'node:path';
import { HostLauncher } from './launch-host.js';
import { SlotKeeper, type KeptSlots } from '../slots/slot-keep.js';
import { AnswerRecords, type SlotTokens } from '../slots/answer-records.js';
import { NodeLauncher } from './launch-node.js';
import { ShardLauncher, type ShardInfo } from './launch-shard.js';
import type { Placement, Running } from '../placements/placement.js';
import type { Liveness } from '../../llama/liveness.js';

export type { ShardInfo } from './launch-shard.js';

/**
 * The launcher makes a planned placement real and takes it down again. The scheduler decides; the launcher
 * only acts, so the scheduler's rules are tested with a launcher of the tests' own. Each kind of placement has
 * its own file: a host replica is a local llama-server (launch-host.ts); a node replica is pushed when the node
 * lacks the file and started by command (launch-node.ts); a shard is ggml-rpc-servers on its member nodes,
 * bridged to local ports, driven by a head llama-server on the hub (launch-shard.ts).
 */
export interface Launcher {
  /** Resolves when the placement answers; rejects with a RelayError (REPLICA_FAILED, NODE_LOST, MODEL_UNAVAILABLE). */
  start(p: Placement, model: ModelRecord): Promise<Running>;
  /**
   * Stops whatever the placement holds (also while it is still starting); never rejects; resolves once its memory is
   * free. `save`: a host replica's slots are saved first, kept for the model's next replica (within
   * RELAY_SLOT_KEEP_MB), and their token lists are the record of any answers that were in flight (answer-records.ts);
   * a node saves its replica's slots as it stops it either way. `kept`, when given, settles true once its slots are in the hub's store for the model's next replica (a node
   * replica's are fetched after its process is gone: slot-carry.ts).
   */
  stop(p: Placement, save?: boolean): Promise<{ readonly kept: Promise<boolean> } | void>;
  /** The token lists of a stopped placement's slots (its answers' record), waited for at most `waitMs`. */
  answerRecord?(placementId: string, waitMs: number): Promise<SlotTokens[]>;
  /**
   * A running placement's idle slots read into its record (an answer just yielded one: the record it goes on from);
   * settles when done or given up. Absent, or a placement that cannot (a shard, slots not kept): nothing.
   */
  recordSlots?(p: Placement): Promise<void>;
  /**
   * Before an idle stop: a host replica saves its slots for the model's next one (slot-keep.ts) while it still
   * serves; what was kept (`discard` it when the replica is used meanwhile), or null. Never rejects.
   */
  keep(p: Placement): Promise<KeptSlots | null>;
  /** A shard's live members, for /status. */
  shardInfo(p: Placement): ShardInfo | null;
  /**
   * Whether the placement's processes can still answer (llama/liveness.ts), asked when a request through it has
   * heard nothing for a while and its nodes answer pings: the worst of its llama-server and rpc-servers.
   */
  check(p: Placement): Promise<Liveness>;
  /** Whether a ggml-rpc-server a node reports is a stage the hub expects there (else reconciliation stops it). */
  expectsRpc(node: string, rpcId: string): boolean;
}

/** The real launcher: each placement goes to the launcher of its kind. */
export class LlamaLauncher implements Launcher {
  private readonly host: HostLauncher;
  private readonly node: NodeLauncher | null;
  private readonly shard: ShardLauncher;
  private readonly records = new AnswerRecords();

  constructor(deps: { config: HubConfig; install: LlamaInstall; nodes?: NodeManager; log: Logger }) {
    // One store of kept conversations: a host replica's may go on in a node replica (slot-keep.ts).
    const slots = new SlotKeeper({ dir: join(deps.config.home, 'slots'), budgetBytes: deps.config.slotKeepMb * 1048576, log: deps.log, now: Date.now });
    this.host = new HostLauncher({ ...deps, slots, records: this.records });
    this.node = deps.nodes ? new NodeLauncher({ config: deps.config, nodes: deps.nodes, log: deps.log, slots, records: this.records }) : null;
    this.shard = new ShardLauncher({ ...deps, nodes: deps.nodes });
  }

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    if (p.kind === 'node') {
      if (!this.node) throw new RelayError(ErrorCode.NODE_LOST, 'this hub has no node manager: a node placement cannot start');
      return this.node.start(p, model);
    }
    if (p.kind === 'shard') return this.shard.start(p, model);
    return this.host.start(p, model);
  }

  stop(p: Placement, save = false): Promise<{ readonly kept: Promise<boolean> } | void> {
    if (p.kind === 'node') return this.node?.stop(p) ?? Promise.resolve();
    if (p.kind === 'shard') return this.shard.stop(p);
    return this.host.stop(p, save);
  }

  answerRecord(placementId: string, waitMs: number): Promise<SlotTokens[]> {
    return this.records.wait(placementId, waitMs);
  }

  recordSlots(p: Placement): Promise<void> {
    if (p.kind === 'node') return this.node?.recordSlots(p) ?? Promise.resolve();
    return p.kind === 'host' ? this.host.recordSlots(p) : Promise.resolve();
  }

  keep(p: Placement): Promise<KeptSlots | null> {
    return p.kind === 'host' ? this.host.keep(p) : Promise.resolve(null);
  }

  shardInfo(p: Placement): ShardInfo | null {
    return p.kind === 'shard' ? this.shard.info(p) : null;
  }

  expectsRpc(node: string, rpcId: string): boolean {
    return this.shard.expects(node, rpcId);
  }

  check(p: Placement): Promise<Liveness> {
    if (p.kind === 'node') return this.node?.check(p) ?? Promise.resolve('gone');
    if (p.kind === 'shard') return this.shard.check(p);
    return this.host.check(p);
  }
}
