import { ErrorCode, RelayError } from '../../../shared/errors.js';
import type { Availability, Command } from '../../../shared/protocol.js';
import type { ModelCache } from './cache/cache.js';
import type { Workloads } from './work/workloads.js';
import type { Logger } from 'pino';

/** What the hub's commands act on. */
export interface CommandTarget {
  readonly name: string;
  readonly cache: ModelCache;
  readonly work: Workloads;
  availability(): { state: Availability; reason: string | null };
  /** The hub's own pause of this node (never the owner's: a node its owner paused stays paused). */
  setHubPaused(paused: boolean): Promise<void>;
  readonly log?: Logger;
}

/**
 * One command from the hub (docs/protocol.md's table), run; the result is the reply's `data`. Starting work
 * on a paused node is refused with model_unavailable; a missing file with model_file_missing.
 */
export async function runCommand(c: Command, t: CommandTarget): Promise<Record<string, unknown> | undefined> {
  const refuseWhilePaused = (): void => {
    if (t.availability().state === 'paused') throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, `node ${t.name} is paused`);
  };
  switch (c.type) {
    case 'push-begin': {
      if (c.siblings) t.cache.pushedWith.set(c.sha256, c.siblings);
      const offset = t.cache.resumeOffset(c.sha256, c.size);
      return offset === null ? { present: true } : { offset };
    }
    case 'start-replica':
      refuseWhilePaused();
      return t.work.startReplica(c, t.name);
    case 'stop-replica': {
      // The slots it kept (slots.ts): the hub fetches them over `slot` streams.
      const slots = await t.work.stopReplica(c.replica, 'the hub asked');
      return slots.length > 0 ? { slots } : undefined;
    }
    case 'start-rpc': {
      refuseWhilePaused();
      const r = await t.work.startRpc(c.rpc, c.cache, c.stage, c.device);
      return { port: r.port };
    }
    case 'stop-rpc':
      await t.work.stopRpc(c.rpc);
      return undefined;
    case 'evict':
      return { removed: t.cache.evict(c.sha256) };
    case 'set-paused': {
      await t.setHubPaused(c.paused);
      const a = t.availability();
      return { availability: a.state, reason: a.reason };
    }
    case 'check':
      return { liveness: await t.work.check({ replica: c.replica, rpc: c.rpc }) };
    case 'rpc-loaded': {
      // The load is over: its weight files are checked (hashed) off the event loop; nothing is pruned until then.
      void t.cache.recordRpcLoad(c.rpc, c.sha256, c.weights ?? []).then(
        (files) =>
          t.log?.info(
            { rpc: c.rpc, weights: (c.weights ?? []).length, recorded: files.length, bytes: files.reduce((a, f) => a + f.size, 0) },
            "recorded the weights a shard stage's load left in the rpc cache",
          ),
        (err: Error) => t.log?.warn({ rpc: c.rpc, message: err.message }, "could not check the weights a shard stage's load left: they are pruned and sent again next time"),
      );
      return { weights: (c.weights ?? []).length };
    }
    case 'fill-rpc-cache': {
      if (!t.cache.has(c.sha256)) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `node ${t.name} does not hold ${c.sha256.slice(0, 12)}…`);
      const idx = await t.cache.fillRpcCache(c.sha256, c.layers ?? null, c.siblings ?? []);
      return { files: idx.files.length, bytes: idx.files.reduce((a, f) => a + f.size, 0) };
    }
  }
}
