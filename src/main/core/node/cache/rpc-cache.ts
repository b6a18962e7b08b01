import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { threadId } from 'node:worker_threads';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { readGgufFile } from '../../gguf/index.js';
import { runInWorker } from '../../worker.js';
import { workerUrl } from '../../app-files.js';
import { WasmFnv } from './fnv.js';
import { processExists } from '../../llama/supervisor.js';

/**
 * ggml-rpc-server's tensor cache, filled by the node from its own copy of a GGUF. With `-c`, for any tensor
 * over 10 MiB the head first sends only the 64-bit FNV-1a hash of its bytes, and the server loads
 * `<cache dir>/<16 hex digits>` when present (ggml-rpc.cpp). A node that already holds the weights can write
 * those files itself, so a shard's cold load moves no large tensor over the network.
 */
export const RPC_HASH_THRESHOLD = 10 * 1024 * 1024;

export interface CacheIndex {
  sha256: string;
  /** One file per cached tensor: its name in the cache (the FNV hash) and the GGUF tensor it holds. */
  files: { name: string; size: number; tensor?: string }[];
}

const indexPath = (dir: string, sha256: string): string => join(dir, `relay-index-${sha256}.json`);

/** Whether a tensor belongs to the layers [first, end) (`blk.N.…`); with no range, every tensor does. */
export function inLayers(name: string, layers: readonly [number, number] | null): boolean {
  if (!layers) return true;
  const m = /^blk\.(\d+)\./.exec(name);
  return m !== null && Number(m[1]) >= layers[0] && Number(m[1]) < layers[1];
}

/** A tensor to cache: its name and where its bytes lie in the GGUF file (absolute offset). */
export interface TensorSpan {
  tensor: string;
  start: number;
  bytes: number;
}

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

/** Parse the GGUF and compare with the index: what `fillRpcCache` would write. Reads only the header. */
export function planRpcFill(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null = null): FillPlan {
  const g = readGgufFile(ggufPath);
  // Files of an earlier fill (another stage's, or this one's) that are still there are kept and not redone.
  const kept = (readIndex(dir, sha256)?.files ?? []).filter((f) => existsSync(join(dir, f.name)));
  const done = new Set(kept.map((f) => f.tensor));
  const todo = g.tensors.filter((t) => t.bytes > RPC_HASH_THRESHOLD && inLayers(t.name, layers) && !done.has(t.name)).map((t) => ({ tensor: t.name, start: g.dataOffset + t.offset, bytes: t.bytes }));
  return { kept, todo, need: todo.reduce((sum, t) => sum + t.bytes, 0) };
}

/**
 * Copy each tensor into the cache dir under its FNV-1a 64 name, reading straight into the WASM hasher's buffer
 * (one read, one hash, one write per 4 MiB). Synchronous: run from a worker thread (rpc-cache-worker.ts).
 */
export function writeTensorFiles(ggufPath: string, spans: readonly TensorSpan[], dir: string): CacheIndex['files'] {
  mkdirSync(dir, { recursive: true });
  const fnv = new WasmFnv();
  const buf = fnv.buffer;
  const files: CacheIndex['files'] = [];
  const fd = openSync(ggufPath, 'r');
  try {
    for (const t of spans) {
      const tmp = join(dir, `.relay-${process.pid}-${threadId}.tmp`);
      const out = openSync(tmp, 'w');
      fnv.reset();
      try {
        for (let done = 0; done < t.bytes;) {
          const n = readSync(fd, buf, 0, Math.min(buf.length, t.bytes - done), t.start + done);
          if (n <= 0) throw new RelayError(ErrorCode.IO_ERROR, `${ggufPath} ends inside tensor ${t.tensor}`);
          fnv.update(n);
          for (let w = 0; w < n;) w += writeSync(out, buf, w, n - w);
          done += n;
        }
      } finally {
        closeSync(out);
      }
      const name = fnv.hex();
      renameSync(tmp, join(dir, name));
      files.push({ name, size: t.bytes, tensor: t.tensor });
    }
  } finally {
    closeSync(fd);
  }
  return files;
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
  const plan = planRpcFill(ggufPath, sha256, dir, layers);
  if (plan.todo.length === 0) return { sha256, files: plan.kept };
  if (!room(plan.need)) throw cacheFull(plan.need, sha256);
  return recordFiles(dir, sha256, writeTensorFiles(ggufPath, plan.todo, dir));
}

const cacheFull = (need: number, sha256: string): RelayError =>
  new RelayError(ErrorCode.CACHE_FULL, `the node's cache budget cannot hold ${Math.round(need / 1048576)} MB of rpc cache for ${sha256.slice(0, 12)}…`, { need_bytes: need });

/** Bytes a fill of `layers` would add (tensors not cached yet). */
export function rpcFillBytes(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null): number {
  return planRpcFill(ggufPath, sha256, dir, layers).need;
}

/** Split spans into `n` groups of near-equal bytes (largest first, each to the lightest group). */
export function shareOut(spans: readonly TensorSpan[], n: number): TensorSpan[][] {
  const groups = Array.from({ length: Math.max(1, Math.min(n, spans.length)) }, () => ({ bytes: 0, spans: [] as TensorSpan[] }));
  for (const s of [...spans].sort((a, b) => b.bytes - a.bytes)) {
    const g = groups.reduce((min, x) => (x.bytes < min.bytes ? x : min));
    g.spans.push(s);
    g.bytes += s.bytes;
  }
  return groups.map((g) => g.spans);
}

const WORKER = workerUrl('rpc-cache');

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
  const plan = await runInWorker<FillPlan>(WORKER, { op: 'plan', ggufPath, sha256, dir, layers });
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
 * After a shard stage's load: the files ggml-rpc-server saved that no index names are `sha256`'s weights (the head
 * sent them in full: the node held no copy to fill from), recorded in its index so pruning keeps them.
 */
export function recordLoadedFiles(dir: string, sha256: string): CacheIndex['files'] {
  if (!existsSync(dir)) return [];
  const named = indexedNames(dir);
  const files = readdirSync(dir)
    .filter((f) => /^[0-9a-f]{16}$/.test(f) && !named.has(f))
    .map((name) => ({ name, size: statSync(join(dir, name)).size }));
  if (files.length > 0) recordFiles(dir, sha256, files);
  return files;
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
