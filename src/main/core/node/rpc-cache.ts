import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { threadId, Worker } from 'node:worker_threads';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { readGgufFile } from '../gguf/index.js';

/**
 * ggml-rpc-server's tensor cache, filled by the node from its own copy of a GGUF. With `-c`, for any tensor
 * over 10 MiB the head first sends only the 64-bit FNV-1a hash of its bytes, and the server loads
 * `<cache dir>/<16 hex digits>` when present (ggml-rpc.cpp). A node that already holds the weights can write
 * those files itself, so a shard's cold load moves no large tensor over the network.
 */
export const RPC_HASH_THRESHOLD = 10 * 1024 * 1024;

/**
 * FNV-1a 64 over `data`, continuing from `state` ([hi, lo] 32-bit halves). Prime 2^40 + 0x1b3:
 * state × prime = state × 0x1b3 + (lo << 40). The low half's product is split in 16-bit halves so every step
 * is exact 32-bit integer arithmetic (no floating-point division per byte).
 */
export function fnv1a64Update(state: [number, number], data: Uint8Array): [number, number] {
  let [hi, lo] = state;
  for (let i = 0; i < data.length; i++) {
    lo = (lo ^ data[i]!) >>> 0;
    const l0 = (lo & 0xffff) * 0x1b3; // < 2^25
    const l1 = (lo >>> 16) * 0x1b3 + (l0 >>> 16); // < 2^26
    hi = (Math.imul(hi, 0x1b3) + (l1 >>> 16) + (lo << 8)) >>> 0;
    lo = ((l1 << 16) | (l0 & 0xffff)) >>> 0;
  }
  return [hi, lo];
}

export const FNV_OFFSET: [number, number] = [0xcbf29ce4, 0x84222325];

export function fnvHex([hi, lo]: [number, number]): string {
  return hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

interface CacheIndex {
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

/**
 * Write one cache file per tensor over the threshold (of the stage's `layers` only, when given); returns what
 * the index records. Idempotent. `room(bytes)` is asked before anything is written (the node's cache budget):
 * false leaves the cache as it was and throws CACHE_FULL. Synchronous: the node runs it in a worker thread
 * (rpc-cache-worker.ts) so the tunnel's keep-alive never waits on it.
 */
export function fillRpcCache(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null = null, room: (bytes: number) => boolean = () => true): CacheIndex {
  mkdirSync(dir, { recursive: true });
  const idx = indexPath(dir, sha256);
  const g = readGgufFile(ggufPath);
  const wanted = g.tensors.filter((t) => t.bytes > RPC_HASH_THRESHOLD && inLayers(t.name, layers));
  const prev = existsSync(idx) ? (JSON.parse(readFileSync(idx, 'utf8')) as CacheIndex) : null;
  // Files of an earlier fill (another stage's, or this one's) that are still there are kept and not redone.
  const files: CacheIndex['files'] = (prev?.files ?? []).filter((f) => existsSync(join(dir, f.name)));
  const done = new Set(files.map((f) => f.tensor));
  const todo = wanted.filter((t) => !done.has(t.name));
  const need = todo.reduce((sum, t) => sum + t.bytes, 0);
  if (todo.length === 0) return { sha256, files };
  if (!room(need)) {
    throw new RelayError(ErrorCode.CACHE_FULL, `the node's cache budget cannot hold ${Math.round(need / 1048576)} MB of rpc cache for ${sha256.slice(0, 12)}…`);
  }
  const fd = openSync(ggufPath, 'r');
  const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
  try {
    for (const t of todo) {
      const tmp = join(dir, `.relay-${process.pid}-${threadId}.tmp`);
      const out = openSync(tmp, 'w');
      let state = FNV_OFFSET;
      try {
        for (let done = 0; done < t.bytes;) {
          const n = readSync(fd, buf, 0, Math.min(buf.length, t.bytes - done), g.dataOffset + t.offset + done);
          if (n <= 0) throw new Error(`${ggufPath} ends inside tensor ${t.name}`);
          const chunk = buf.subarray(0, n);
          state = fnv1a64Update(state, chunk);
          writeSync(out, chunk);
          done += n;
        }
      } finally {
        closeSync(out);
      }
      const name = fnvHex(state);
      renameSync(tmp, join(dir, name));
      files.push({ name, size: t.bytes, tensor: t.name });
    }
  } finally {
    closeSync(fd);
  }
  const index = { sha256, files };
  writeFileSync(idx, JSON.stringify(index));
  return index;
}

/** Bytes a fill of `layers` would add (tensors not cached yet): what the node's budget is asked for first. */
export function rpcFillBytes(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null): number {
  const idx = indexPath(dir, sha256);
  const prev = existsSync(idx) ? (JSON.parse(readFileSync(idx, 'utf8')) as CacheIndex) : null;
  const done = new Set((prev?.files ?? []).filter((f) => existsSync(join(dir, f.name))).map((f) => f.tensor));
  return readGgufFile(ggufPath).tensors
    .filter((t) => t.bytes > RPC_HASH_THRESHOLD && inLayers(t.name, layers) && !done.has(t.name))
    .reduce((sum, t) => sum + t.bytes, 0);
}

/** fillRpcCache in a worker thread: gigabytes of reading, hashing and writing never block the node's event loop. */
export function fillRpcCacheInWorker(ggufPath: string, sha256: string, dir: string, layers: readonly [number, number] | null): Promise<CacheIndex> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL('./rpc-cache-worker.js', import.meta.url), { workerData: { ggufPath, sha256, dir, layers } });
    w.once('message', (m: { ok: true; index: CacheIndex } | { ok: false; code: ErrorCode; message: string }) => {
      if (m.ok) resolve(m.index);
      else reject(new RelayError(m.code, m.message));
    });
    w.once('error', (err) => reject(new RelayError(ErrorCode.IO_ERROR, `rpc cache fill failed: ${err.message}`)));
    w.once('exit', (code) => {
      if (code !== 0) reject(new RelayError(ErrorCode.IO_ERROR, `rpc cache fill worker exited with ${code}`));
    });
  });
}

/** Bytes the cache holds (all files, relay's or ggml-rpc-server's own). */
export function rpcCacheBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  let total = 0;
  for (const f of readdirSync(dir)) total += statSync(join(dir, f)).size;
  return total;
}

/** Remove the cache files that were filled for `sha256` (evicted with the model file). */
export function evictRpcCache(dir: string, sha256: string): void {
  const idx = indexPath(dir, sha256);
  if (!existsSync(idx)) return;
  const index = JSON.parse(readFileSync(idx, 'utf8')) as CacheIndex;
  for (const f of index.files) rmSync(join(dir, f.name), { force: true });
  rmSync(idx, { force: true });
}
