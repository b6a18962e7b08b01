import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { threadId } from 'node:worker_threads';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { runInWorker } from '../../worker.js';
import { workerUrl } from '../../app-files.js';
import { processExists } from '../../llama/supervisor.js';
import { shareOut, tensorSpans, writeTensorFiles, type TensorSpan, type WeightFile } from '../../llama/rpc-tensors.js';

/**
 * ggml-rpc-server's tensor cache on a node (llama/rpc-tensors.ts says what it holds): filled by the node from its own
 * copy of a GGUF, so a shard's cold load moves no large tensor over the network, or by a stage's load itself when it
 * holds none. Each model's weight files are named in an index (`relay-index-<sha256>.json`); anything else is not a
 * weight and goes.
 */
export interface CacheIndex {
  sha256: string;
  /** One file per cached tensor: its name in the cache (the FNV hash) and the GGUF tensor it holds. */
  files: WeightFile[];
}

const indexPath = (dir: string, sha256: string): string => join(dir, `relay-index-${sha256}.json`);

/** What a fill of `layers` has to do: files already cached (kept), tensors still to write, and their bytes. */
export interface FillPlan {
  kept: CacheIndex['files'];
  todo: TensorSpan[];
  need: number;
}

/** The index of `sha256`, or null when there is none or it cannot be read (its files are then unnamed: pruned). */
const readIndex = (dir: string, sha256: string): CacheIndex | null => {
  try {
    const index = JSON.parse(readFileSync(indexPath(dir, sha256), 'utf8')) as CacheIndex;
    return Array.isArray(index.files) ? index : null;
  } catch {
    return null;
  }
};

/** The stage's tensors (llama/rpc-tensors.ts tensorSpans) against the index: what `fillRpcCache` would write. */
export function planRpcFill(spans: readonly TensorSpan[], sha256: string, dir: string): FillPlan {
  // Files of an earlier fill (another stage's, or this one's) that are still there are kept and not redone.
  const kept = (readIndex(dir, sha256)?.files ?? []).filter((f) => existsSync(join(dir, f.name)));
  const done = new Set(kept.map((f) => f.tensor));
  const todo = spans.filter((t) => !done.has(t.tensor));
  return { kept, todo, need: todo.reduce((sum, t) => sum + t.bytes, 0) };
}

/**
 * Record the files of `sha256` in its index, merged with what the index holds now (two stages of one model may
 * fill at once on a node: neither loses the other's entries).
 */
export function recordFiles(dir: string, sha256: string, files: CacheIndex['files']): CacheIndex {
  const merged = new Map<string, CacheIndex['files'][number]>();
  for (const f of [...(readIndex(dir, sha256)?.files ?? []), ...files]) if (existsSync(join(dir, f.name))) merged.set(f.tensor ?? f.name, f);
  const index = { sha256, files: [...merged.values()] };
  const tmp = join(dir, `.relay-index-${process.pid}-${threadId}.tmp`); // renamed whole: a crash leaves the old index
  writeFileSync(tmp, JSON.stringify(index));
  renameSync(tmp, indexPath(dir, sha256));
  return index;
}

/**
 * Write one cache file per tensor over the threshold (of the stage's `layers` only, when given); returns what
 * the index records. Idempotent. `room(bytes)` is asked before anything is written (the node's cache budget):
 * false leaves the cache as it was and throws CACHE_FULL. Synchronous, in the calling thread: the node uses
 * `fillRpcCacheOffThread`.
 */
export function fillRpcCache(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null = null, room: (bytes: number) => boolean = () => true): CacheIndex {
  const plan = planRpcFill(tensorSpans(ggufPath, layers), sha256, dir);
  if (plan.todo.length === 0) return { sha256, files: plan.kept };
  if (!room(plan.need)) throw cacheFull(plan.need, sha256);
  return recordFiles(dir, sha256, writeTensorFiles(ggufPath, plan.todo, dir));
}

const cacheFull = (need: number, sha256: string): RelayError =>
  new RelayError(ErrorCode.CACHE_FULL, `the node's cache budget cannot hold ${Math.round(need / 1048576)} MB of rpc cache for ${sha256.slice(0, 12)}…`, { need_bytes: need });

/** Bytes a fill of `layers` would add (tensors not cached yet). */
export function rpcFillBytes(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null): number {
  return planRpcFill(tensorSpans(ggufPath, layers), sha256, dir).need;
}

const WORKER = workerUrl('rpc-tensors');

/**
 * The node's fill: the GGUF is parsed in a worker, `room(need)` is asked on the caller's thread (the budget
 * may evict), then `threads` workers hash and write their share of the tensors at once (one FNV chain is
 * ~4 cycles a byte; tensors are independent). The event loop only waits.
 */
export async function fillRpcCacheOffThread(
  ggufPath: string,
  sha256: string,
  dir: string,
  layers: readonly [number, number] | null,
  room: (bytes: number) => boolean = () => true,
  threads = Math.min(availableParallelism(), 4),
): Promise<CacheIndex> {
  const plan = planRpcFill(await runInWorker<TensorSpan[]>(WORKER, { op: 'spans', ggufPath, layers }), sha256, dir);
  if (plan.todo.length === 0) return { sha256, files: plan.kept };
  if (!room(plan.need)) throw cacheFull(plan.need, sha256);
  const parts = await Promise.all(shareOut(plan.todo, threads).map((spans) => runInWorker<CacheIndex['files']>(WORKER, { op: 'write', ggufPath, spans, dir })));
  return recordFiles(dir, sha256, parts.flat());
}

/** Filesystem timestamps are coarse (a kernel tick behind the clock): a file written just after `keepFrom` may read earlier. */
const MTIME_SLACK_MS = 1000;

/**
 * A fill's temporary file (`.relay-PID-THREAD.tmp`, `.relay-index-PID-THREAD.tmp`) whose process is gone: a fill cut
 * short by a crash or a kill, never to be renamed. One whose process lives (this node's own fill, in a worker; the
 * node's while `relay cache prune` runs beside it) is kept.
 */
export function abandonedTemp(name: string): boolean {
  const m = /^\.relay-(?:index-)?(\d+)-\d+\.tmp$/.exec(name);
  return m !== null && !processExists(Number(m[1]));
}

/**
 * Keep only weights: remove every file of the cache that no index names. This ggml-rpc-server (RPC protocol 6)
 * saves every SET_TENSOR over 10 MiB there, a long prompt's activations and attention masks included (upstream
 * llama.cpp keeps weights only since protocol 7, PR #28789): left alone, each long prompt through a shard adds
 * hundreds of MB, and a file cut short by a full disk would later be served as a whole tensor. The weights are the
 * files relay filled itself, each named by its tensor's FNV hash in an index. Indexes and a live fill's temporary
 * files stay (a dead process's go: abandonedTemp), and so does any file written since `keepFrom` (a fill under way: its files are indexed when all are
 * written). Returns the bytes removed. A file the server is about to read only means it is sent again in full.
 */
export function pruneRpcCache(dir: string, keepFrom: number | null = null): number {
  let names: string[];
  let weights: Set<string>;
  try {
    [names, weights] = [readdirSync(dir), indexedNames(dir)];
  } catch {
    return 0; // no cache yet, or unreadable now: the next prune tries again (it runs from the node's heartbeat)
  }
  let removed = 0;
  for (const f of names) {
    if (weights.has(f) || f.startsWith('relay-index-') || (f.startsWith('.relay-') && !abandonedTemp(f))) continue;
    try {
      const st = statSync(join(dir, f));
      if (keepFrom !== null && st.mtimeMs >= keepFrom - MTIME_SLACK_MS) continue;
      rmSync(join(dir, f), { force: true });
      removed += st.size;
    } catch {
      /* gone meanwhile, or held open (Windows): the next prune tries again */
    }
  }
  return removed;
}

/**
 * After a shard stage's load, the files ggml-rpc-server saved that are `sha256`'s weights (the head sent them in full:
 * the node held no copy to fill from): the stage's weight files the hub named (`weights`: it hashed the stage's
 * tensors from its own copy, llama/rpc-tensors.ts), each only when it is there whole — of its size, its bytes
 * hashing to its name (checked in a worker). A file a full disk cut short, or anything another stage or shard saved
 * meanwhile, is no weight of this stage: a short one is removed now, the rest is pruned. Recorded in the index.
 */
export async function recordLoadedFiles(dir: string, sha256: string, weights: readonly WeightFile[]): Promise<CacheIndex['files']> {
  if (!existsSync(dir) || weights.length === 0) return [];
  const named = indexedNames(dir);
  const candidates = weights.filter((w) => !named.has(w.name) && existsSync(join(dir, w.name)));
  const whole = candidates.length > 0 ? await runInWorker<WeightFile[]>(WORKER, { op: 'whole', dir, files: candidates }) : [];
  const good = new Set(whole.map((w) => w.name));
  for (const w of candidates) if (!good.has(w.name)) rmSync(join(dir, w.name), { force: true });
  if (whole.length > 0) recordFiles(dir, sha256, whole);
  return whole;
}

/** Every cache file some index names (the weights). */
function indexedNames(dir: string): Set<string> {
  const names = new Set<string>();
  for (const f of readdirSync(dir)) {
    const m = /^relay-index-([0-9a-f]{64})\.json$/.exec(f);
    if (m) for (const x of readIndex(dir, m[1]!)?.files ?? []) names.add(x.name);
  }
  return names;
}

/** Bytes the cache holds (all files, relay's or ggml-rpc-server's own). */
export function rpcCacheBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  let total = 0;
  for (const f of readdirSync(dir)) {
    try {
      total += statSync(join(dir, f)).size;
    } catch {
      /* gone since the listing: a fill's temp file renamed, a file evicted */
    }
  }
  return total;
}

/** The models whose weights the cache holds an index of, and their bytes (the node's budget may evict them). */
export function indexedModels(dir: string): { sha256: string; bytes: number; mtimeMs: number }[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((f) => {
    const m = /^relay-index-([0-9a-f]{64})\.json$/.exec(f);
    const index = m ? readIndex(dir, m[1]!) : null;
    if (!index) return [];
    const st = statSync(join(dir, f), { throwIfNoEntry: false });
    if (!st) return [];
    return [{ sha256: index.sha256, bytes: index.files.reduce((n, x) => n + (existsSync(join(dir, x.name)) ? x.size : 0), 0), mtimeMs: st.mtimeMs }];
  });
}

/**
 * Remove the cache files that were filled for `sha256` (evicted with the model file). A file is named by the hash
 * of a tensor's bytes, so another model with the same tensor (the same weights as one file and split, two
 * quantizations sharing a layer) lists it too: such a file stays while another index names it.
 */
export function evictRpcCache(dir: string, sha256: string): void {
  const index = readIndex(dir, sha256);
  rmSync(indexPath(dir, sha256), { force: true }); // first: what the other indexes name is what stays
  if (!index) return;
  const others = indexedNames(dir);
  for (const f of index.files) if (!others.has(f.name)) rmSync(join(dir, f.name), { force: true });
}
