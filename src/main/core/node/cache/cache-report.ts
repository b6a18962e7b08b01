import { statSync } from 'node:fs';
import type { CachedFile } from '../../../../shared/protocol.js';
import { diskFreeBytes, type CacheBudget, type ModelCache } from './cache.js';
import { rpcCacheBytes } from './rpc-cache.js';

/** What `relay cache ls` shows: the budget, the files (newest use first), partial pushes, rpc-cache bytes. */
export interface CacheReport {
  readonly dir: string;
  readonly budget: { readonly setting: CacheBudget; readonly bytes: number };
  readonly used_bytes: number;
  readonly disk_free_bytes: number;
  readonly files: readonly { sha256: string; size: number; last_used: string; in_use: boolean }[];
  readonly partials: readonly CachedFile[];
  readonly rpc_cache_bytes: number;
}

export function cacheReport(c: ModelCache): CacheReport {
  return {
    dir: c.root,
    budget: { setting: c.budget, bytes: c.budgetBytes },
    used_bytes: c.usedBytes(),
    disk_free_bytes: diskFreeBytes(c.root),
    files: c
      .inventory()
      .map((f) => ({ ...f, last_used: statSync(c.pathOf(f.sha256)).mtime.toISOString(), in_use: c.inUse.has(f.sha256) }))
      .sort((a, b) => b.last_used.localeCompare(a.last_used)),
    partials: c.partials(),
    rpc_cache_bytes: rpcCacheBytes(c.rpcCacheDir),
  };
}
