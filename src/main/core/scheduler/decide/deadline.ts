/**
 * How long a load may take: one rule for every placement kind (host replica, node replica, shard head), on the
 * hub and on nodes alike — a base, plus a term per GiB of the model's weights. A 40 GB model from a spinning
 * disk needs minutes that a 500 MB model never should. The node is told the number with start-replica.
 */
export interface LoadDeadlineSettings {
  readonly loadBaseMs: number;
  readonly loadMsPerGib: number;
}

const GIB = 1024 ** 3;

export function loadDeadlineMs(weightsBytes: number, s: LoadDeadlineSettings): number {
  return Math.round(s.loadBaseMs + (s.loadMsPerGib * Math.max(0, weightsBytes)) / GIB);
}

/** How long the hub waits for a node's answer to start-replica beyond the load's own deadline (a reply crossing a busy link). */
export const NODE_REPLY_MARGIN_MS = 30_000;
