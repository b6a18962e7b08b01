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

/**
 * Node replicas: the model is pushed when the node lacks a file of it, then started by a `start-replica`
 * command; requests reach it as http streams through the node's tunnel. The node owns the process.
 */
export class NodeLauncher {
  constructor(private readonly deps: { config: HubConfig; nodes: NodeManager; log: Logger }) {}

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    const conn = p.node!;
    const c = settingsFor(this.deps.config, model);
    const log = this.deps.log.child({ placement: p.id, model: model.name, node: conn.name });
    try {
      if (!cachedIn(conn.cache, model)) await this.deps.nodes.push(conn, model);
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

  async stop(p: Placement): Promise<void> {
    if (p.node?.alive) await p.node.command({ type: 'stop-replica', replica: p.id }, STOP_REPLICA_WAIT_MS).catch(() => undefined);
  }
}
