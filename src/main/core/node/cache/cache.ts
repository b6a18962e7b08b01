import { existsSync, mkdirSync, readdirSync, rmSync, statfsSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { evictRpcCache, fillRpcCacheOffThread, indexedModels, pruneRpcCache, recordLoadedFiles, rpcCacheBytes, type CacheIndex } from './rpc-cache.js';
import type { WeightFile } from '../../llama/rpc-tensors.js';
import { receivePush } from './receive.js';
import type { CachedFile } from '../../../../shared/protocol.js';
import { dropSplitViews, makeSplitView } from './split-view.js';
import { removeUnlessBusy } from './windows-files.js';
import { CountedSet } from './counted-set.js';

/**
 * The node's copy of the weights the hub granted it. Files are named by their sha256 (validated hex), so
 * nothing the hub sends can name a path outside the cache dir. A push lands in partial/<sha>.part, is
 * verified whole, then renamed into models/<sha>.gguf; an interrupted push resumes from the partial file.
 */
const SHA_RE = /^[0-9a-f]{64}$/;

/** The default budget: this share of what the cache could grow to (its own files plus the disk's free space). */
export const AUTO_CACHE_SHARE = 0.5;

/** How the budget is set: a number of bytes (0: no cap), or 'auto' (AUTO_CACHE_SHARE of free disk + the cache). */
export type CacheBudget = number | 'auto';

/** Free bytes for an unprivileged writer on the filesystem holding `dir`. */
export function diskFreeBytes(dir: string): number {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
}

export class ModelCache {
  readonly modelsDir: string;
  readonly partialDir: string;
  /** ggml-rpc-server's tensor cache (LLAMA_CACHE=<root>/llama): counted in the budget, evicted with its model. */
  readonly rpcCacheDir: string;
  /** Files a replica or rpc-server uses now: never evicted. */
  readonly inUse = new Set<string>();

  /** Models a shard stage's rpc cache is being filled from: neither pruned nor evicted for room meanwhile. */
  readonly filling = new CountedSet();
  /** A part being pushed → the other parts of its split model (push-begin's `siblings`): not evicted for it. */
  readonly pushedWith = new Map<string, readonly string[]>();
  /** Pushes being received now: their partial files are not pruned. */
  private readonly receiving = new Set<string>();
  /** Evictions deferred: the file was in use, or Windows refused the delete (open elsewhere). */
  readonly toEvict = new Set<string>();

  constructor(
    readonly root: string,
    /** Changed while the node runs by setBudget (the tray's settings); the next push is held to it. */
    public budget: CacheBudget,
    private readonly freeBytes: () => number = () => diskFreeBytes(root),
  ) {
    this.modelsDir = join(root, 'models');
    this.partialDir = join(root, 'partial');
    this.rpcCacheDir = join(root, 'llama', 'rpc');
    mkdirSync(this.modelsDir, { recursive: true });
    mkdirSync(this.partialDir, { recursive: true });
  }

  private static check(sha256: string): string {
    if (!SHA_RE.test(sha256)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `not a sha256: ${JSON.stringify(sha256).slice(0, 80)}`);
    return sha256;
  }

  pathOf(sha256: string): string {
    return join(this.modelsDir, `${ModelCache.check(sha256)}.gguf`);
  }

  partialOf(sha256: string): string {
    return join(this.partialDir, `${ModelCache.check(sha256)}.part`);
  }

  has(sha256: string): boolean {
    return existsSync(this.pathOf(sha256));
  }

  /** Mark a file as just used (its mtime orders eviction). */
  touch(sha256: string): void {
    this.toEvict.delete(sha256); // used again: the hub wants it after all
    const now = new Date();
    try {
      utimesSync(this.pathOf(sha256), now, now);
    } catch {
      /* evicted meanwhile */
    }
  }

  private list(dir: string, ext: string): CachedFile[] {
    return readdirSync(dir)
      .filter((f) => f.endsWith(ext) && SHA_RE.test(f.slice(0, 64)) && f.length === 64 + ext.length)
      .map((f) => ({ sha256: f.slice(0, 64), size: statSync(join(dir, f)).size }));
  }

  inventory(): CachedFile[] {
    return this.list(this.modelsDir, '.gguf');
  }

  partials(): CachedFile[] {
    return this.list(this.partialDir, '.part');
  }

  /** The budget in bytes now (0: no cap); 'auto' follows the disk: files written elsewhere shrink it. */
  get budgetBytes(): number {
    if (this.budget !== 'auto') return this.budget;
    return Math.floor(AUTO_CACHE_SHARE * (this.freeBytes() + this.usedBytes()));
  }

  /**
   * Free the disk now: every cached model no replica or rpc-server uses (with its rpc-cache files) and every
   * partial push not being received. The hub pushes a model again when it needs it here.
   */
  prune(): { removed: CachedFile[]; kept: { sha256: string; size: number; why: string }[]; partials: CachedFile[] } {
    const removed: CachedFile[] = [];
    const kept: { sha256: string; size: number; why: string }[] = [];
    for (const f of this.inventory()) {
      if (this.inUse.has(f.sha256) || this.filling.has(f.sha256)) {
        kept.push({ ...f, why: this.inUse.has(f.sha256) ? 'in use' : 'a shard stage is being prepared from it' });
        continue;
      }
      if (this.evict(f.sha256) === 'deferred') kept.push({ ...f, why: 'open in another program (Windows will not delete it yet)' });
      else removed.push(f);
    }
    const partials = this.partials().filter((f) => !this.receiving.has(f.sha256) && removeUnlessBusy(this.partialOf(f.sha256)));
    return { removed, kept, partials };
  }

  /** Shard stages loading (start-rpc until rpc-loaded or the rpc-server's end): their weights are saved, unnamed yet. */
  readonly rpcLoading = new Set<string>();

  /**
   * A shard stage loaded: the files its rpc-server saved that the hub named as the stage's weights, and are whole,
   * go into `sha256`'s index (rpc-cache.ts recordLoadedFiles); then the load is over and pruning may go on.
   */
  async recordRpcLoad(rpc: string, sha256: string, weights: readonly WeightFile[]): Promise<CacheIndex['files']> {
    try {
      return await recordLoadedFiles(this.rpcCacheDir, sha256, weights);
    } finally {
      this.rpcLoading.delete(rpc);
    }
  }

  /**
   * Remove what ggml-rpc-server saved beyond the weights (rpc-cache.ts pruneRpcCache); bytes freed. Not during a
   * load; during fills, nothing written since the first began (their files are indexed only when all are written).
   */
  pruneRpcCache(): number {
    return this.rpcLoading.size > 0 ? 0 : pruneRpcCache(this.rpcCacheDir, this.filling.since);
  }

  usedBytes(): number {
    return [...this.inventory(), ...this.partials()].reduce((s, f) => s + f.size, 0) + rpcCacheBytes(this.rpcCacheDir);
  }

  /** Where a push of `sha256` should resume: the partial file's length (0 when none), or null when cached. */
  resumeOffset(sha256: string, size: number): number | null {
    if (this.has(sha256)) {
      this.toEvict.delete(sha256); // the hub is told it is here: a deferred eviction of it is off
      return null;
    }
    const p = this.partialOf(sha256);
    if (!existsSync(p)) return 0;
    const have = statSync(p).size;
    if (have > size) {
      rmSync(p, { force: true });
      return 0;
    }
    return have;
  }

  /**
   * Make room for `bytes` more under the budget by evicting least-recently-used files not in use: cached models
   * and partial pushes alike (a partial left by a push that never finished — its model removed on the hub while
   * the node was away, or pushed elsewhere since — counts against the budget like a model; it is only the
   * cheaper start of a push that may never come). Returns false when even that cannot make room.
   */
  makeRoom(bytes: number, keep: string | Iterable<string> | null = null): boolean {
    const kept = new Set(typeof keep === 'string' ? [keep] : (keep ?? []));
    const budget = this.budgetBytes;
    if (budget <= 0) return true;
    let used = this.usedBytes();
    if (used + bytes <= budget) return true;
    used -= this.pruneRpcCache(); // what ggml-rpc-server kept that is no weight goes first: never needed again
    if (used + bytes <= budget) return true;
    const mtime = (p: string): number => {
      try {
        return statSync(p).mtimeMs;
      } catch {
        return 0;
      }
    };
    const models = this.inventory()
      .filter((f) => !this.inUse.has(f.sha256) && !this.filling.has(f.sha256) && !kept.has(f.sha256))
      .map((f) => ({ ...f, partial: false, mtime: mtime(this.pathOf(f.sha256)) }));
    const partials = this.partials()
      .filter((f) => !this.receiving.has(f.sha256) && !kept.has(f.sha256))
      .map((f) => ({ ...f, partial: true, mtime: mtime(this.partialOf(f.sha256)) }));
    // Weights a stage's load left for a model this node holds no copy of: room like that model's file would be
    // (never during a load: its server may be reading them).
    const held = new Set(this.inventory().map((f) => f.sha256));
    const rpcOnly =
      this.rpcLoading.size > 0
        ? []
        : indexedModels(this.rpcCacheDir)
            .filter((m) => !held.has(m.sha256) && !kept.has(m.sha256) && m.bytes > 0)
            .map((m) => ({ sha256: m.sha256, size: m.bytes, partial: false, rpcOnly: true, mtime: m.mtimeMs }));
    const candidates = [...models, ...partials, ...rpcOnly].sort((a, b) => a.mtime - b.mtime);
    // Evict nothing when even evicting everything would not make room: a refused push should cost nothing.
    if (used - candidates.reduce((s, f) => s + f.size, 0) + bytes > budget) return false;
    for (const f of candidates) {
      if (used + bytes <= budget) break;
      // A file Windows will not delete (open elsewhere) stays, counted; the next candidate is tried instead.
      if (f.partial) {
        if (removeUnlessBusy(this.partialOf(f.sha256))) used -= f.size;
        continue;
      }
      if ('rpcOnly' in f) {
        const before = rpcCacheBytes(this.rpcCacheDir);
        evictRpcCache(this.rpcCacheDir, f.sha256);
        used -= before - rpcCacheBytes(this.rpcCacheDir);
        continue;
      }
      const before = rpcCacheBytes(this.rpcCacheDir);
      if (this.removeModel(f.sha256)) used -= f.size + (before - rpcCacheBytes(this.rpcCacheDir));
    }
    return used + bytes <= budget;
  }

  /**
   * Fill ggml-rpc-server's tensor cache from the cached GGUF (a shard stage's layers, or all): parsed and hashed
   * off the event loop, inside the budget (evicting least-recently-used models if it must, never the other
   * parts of its split model, `siblings`); the file is neither pruned nor evicted for room meanwhile.
   */
  async fillRpcCache(sha256: string, layers: readonly [number, number] | null, siblings: readonly string[] = []): Promise<CacheIndex> {
    this.touch(sha256);
    this.filling.add(sha256);
    try {
      return await fillRpcCacheOffThread(this.pathOf(sha256), sha256, this.rpcCacheDir, layers, (need) => this.makeRoom(need, [sha256, ...siblings]));
    } finally {
      this.filling.delete(sha256);
    }
  }

  /**
   * Remove a model's file, its rpc-cache files and any partial push of it (unless one is being received). A
   * file a replica uses (inUse: released when its process has exited), or one Windows will not delete (open
   * elsewhere), is 'deferred': it stays, listed, until retryEvictions when a placement stops.
   */
  evict(sha256: string): boolean | 'deferred' {
    const had = existsSync(this.pathOf(sha256)) || existsSync(this.partialOf(sha256));
    if (this.inUse.has(sha256) || !this.removeModel(sha256)) {
      this.toEvict.add(sha256);
      return 'deferred';
    }
    this.toEvict.delete(sha256);
    if (!this.receiving.has(sha256)) removeUnlessBusy(this.partialOf(sha256));
    return had;
  }

  /** Carry out the deferred evictions whose files nothing uses now (called when a placement stops). */
  retryEvictions(): void {
    for (const sha of [...this.toEvict]) if (!this.inUse.has(sha)) this.evict(sha);
  }

  /** The model file, its split views (dropped first: found by what they link to) and its rpc-cache files. */
  private removeModel(sha256: string): boolean {
    this.dropSplitViews(this.pathOf(sha256));
    if (!removeUnlessBusy(this.pathOf(sha256))) return false;
    evictRpcCache(this.rpcCacheDir, sha256);
    return true;
  }

  /**
   * A split model as llama.cpp loads it (split-view.ts): links under split/<id>/ to the parts in models/. Every
   * part must be cached. Returns the first part's path, the one llama-server is given.
   */
  splitView(id: string, parts: readonly string[]): string {
    const dir = join(this.root, 'split', ModelCache.check(id));
    for (const sha of parts) {
      if (!this.has(sha)) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `the cache does not hold part ${parts.indexOf(sha) + 1} of ${parts.length} (${sha.slice(0, 12)}…)`);
    }
    return makeSplitView(
      dir,
      parts.map((sha) => this.pathOf(sha)),
    );
  }

  private dropSplitViews(target: string): void {
    dropSplitViews(join(this.root, 'split'), target);
  }

  /**
   * Receive bytes [offset, size) of `sha256` from `src`, append them to the partial file, then verify the whole
   * file's sha256 and move it into place. A short stream leaves the partial file for the next attempt; a
   * wrong hash deletes it (HASH_MISMATCH); a full disk deletes it (DISK_FULL).
   */
  async receive(src: Readable, sha256: string, offset: number, size: number, onProgress?: (done: number) => void): Promise<void> {
    const part = this.partialOf(sha256);
    const have = existsSync(part) ? statSync(part).size : 0;
    if (have !== offset) throw new RelayError(ErrorCode.INVALID_REQUEST, `push of ${sha256.slice(0, 12)}… starts at ${offset} but the partial file has ${have} bytes`);
    // The other parts of the same split model are kept too: evicting one to fit this one would never end.
    if (!this.makeRoom(size - offset, [sha256, ...(this.pushedWith.get(sha256) ?? [])])) {
      const how = this.budget === 'auto' ? `auto: ${AUTO_CACHE_SHARE * 100}% of the free disk and the cache; set --cache-budget-mb to change it` : 'set with --cache-budget-mb';
      throw new RelayError(ErrorCode.CACHE_FULL, `the node's cache budget (${Math.round(this.budgetBytes / 1048576)} MB, ${how}) cannot hold ${Math.round(size / 1048576)} MB`);
    }
    this.receiving.add(sha256);
    try {
      await receivePush(src, this.partialOf(sha256), this.pathOf(sha256), sha256, offset, size, onProgress);
    } finally {
      this.receiving.delete(sha256);
      this.pushedWith.delete(sha256); // the next push-begin says it again
    }
  }
}
