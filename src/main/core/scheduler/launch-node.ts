import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import { cachedIn, modelFiles } from '../models/files.js';
import type { NodeManager } from '../pool/manager.js';
import type { ModelRecord } from '../store/store.js';
import { STOP_REPLICA_WAIT_MS } from '../timeouts.js';
import { poolingFor, settingsFor } from './model-settings.js';
import type { Placement, Running } from './placement.js';
import { describeNeed } from './plan.js';
import { NODE_REPLY_MARGIN_MS } from './deadline.js';
import { launchError } from './launch-host.js';
import { asLiveness, type Liveness } from '../llama/liveness.js';

/** A node's answer to check: its /health probe takes up to 3 s, a busy link a little more. */
export const CHECK_WAIT_MS = 8000;

/**
 * Node replicas: the model is pushed when the node lacks a file of it, then started by a `start-replica`
 * command carrying the load's deadline; requests reach it as http streams through the node's tunnel. The node
 * owns the process and holds it from its spawn: a stop-replica while it loads kills it, and is answered once it
 * has exited. A stop during the push means no start-replica is sent at all.
 */
export class NodeLauncher {
  /** Starts in flight, and whether a stop came meanwhile. */
  private readonly starting = new Map<string, { stopped: boolean }>();

  constructor(private readonly deps: { config: HubConfig; nodes: NodeManager; log: Logger }) {}

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    const conn = p.node!;
    const c = settingsFor(this.deps.config, model);
    const log = this.deps.log.child({ placement: p.id, model: model.name, node: conn.name });
    const me = { stopped: false };
    this.starting.set(p.id, me);
    try {
      if (!cachedIn(conn.cache, model)) await this.deps.nodes.push(conn, model);
      if (me.stopped) throw new RelayError(ErrorCode.REPLICA_FAILED, 'stopped while its weights were pushed');
      log.info({ device: p.device, need: describeNeed(model.name, p.fit), deadline_s: Math.round(p.deadlineMs / 1000) }, 'starting node replica');
      const files = modelFiles(model);
      p.loadingSince = Date.now();
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
          ...(model.reranker ? { reranking: true } : {}),
          ...(model.mmproj ? { mmproj: model.mmproj.sha256 } : {}),
          ...(model.draft ? { draft: { sha256: model.draft.sha256, max: model.draft.max, min: model.draft.min } } : {}),
          pooling: poolingFor(model),
          alias: model.name,
          device: p.device,
          loadTimeoutMs: p.deadlineMs,
        },
        p.deadlineMs + NODE_REPLY_MARGIN_MS,
      );
      const pid = typeof reply.data?.pid === 'number' ? reply.data.pid : null;
      return { baseUrl: `http://${conn.name}.node.relay`, connect: () => conn.open({ kind: 'http', replica: p.id }), port: null, pid, buffers: [], exited: null, tail: () => '' };
    } catch (err) {
      if (isRelayError(err) && (err.code === ErrorCode.MODEL_UNAVAILABLE || err.code === ErrorCode.NODE_LOST)) throw err;
      throw launchError(err, `could not start a replica of "${model.name}" on node ${conn.name}`, { model: model.name, node: conn.name });
    } finally {
      this.starting.delete(p.id);
    }
  }

  /** The node's own answer on its replica's llama-server (its process state, its /health on loopback). */
  async check(p: Placement): Promise<Liveness> {
    if (!p.node?.alive) return 'gone';
    const r = await p.node.command({ type: 'check', replica: p.id }, CHECK_WAIT_MS);
    return asLiveness(r.data?.liveness);
  }

  /** Stops the replica, loading or ready; resolves once the node says its process has exited. */
  async stop(p: Placement): Promise<void> {
    const start = this.starting.get(p.id);
    if (start) start.stopped = true;
    if (p.node?.alive) await p.node.command({ type: 'stop-replica', replica: p.id }, STOP_REPLICA_WAIT_MS).catch(() => undefined);
  }
}
