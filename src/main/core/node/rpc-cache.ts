import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { readGgufFile } from '../gguf/index.js';

/**
 * ggml-rpc-server's tensor cache, filled by the node from its own copy of a GGUF. With `-c`, for any tensor
 * over 10 MiB the head first sends only the 64-bit FNV-1a hash of its bytes, and the server loads
 * `<cache dir>/<16 hex digits>` when present (ggml-rpc.cpp). A node that already holds the weights can write
 * those files itself, so a shard's cold load moves no large tensor over the network.
 */
export const RPC_HASH_THRESHOLD = 10 * 1024 * 1024;

/** FNV-1a 64 over `data`, continuing from `state` ([hi, lo] 32-bit halves). Prime 2^40 + 0x1b3. */
export function fnv1a64Update(state: [number, number], data: Uint8Array): [number, number] {
  let [hi, lo] = state;
  for (let i = 0; i < data.length; i++) {
    lo = (lo ^ data[i]!) >>> 0;
    const loMul = lo * 0x1b3; // < 2^41: exact in a double
    const carry = Math.floor(loMul / 0x1_0000_0000);
    hi = (Math.imul(hi, 0x1b3) + carry + (lo << 8)) >>> 0;
    lo = loMul >>> 0;
  }
  return [hi, lo];
}

export const FNV_OFFSET: [number, number] = [0xcbf29ce4, 0x84222325];

export function fnvHex([hi, lo]: [number, number]): string {
  return hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

interface CacheIndex {
  sha256: string;
  files: { name: string; size: number }[];
}

const indexPath = (dir: string, sha256: string): string => join(dir, `relay-index-${sha256}.json`);

/** Write one cache file per tensor over the threshold; returns what the index records. Idempotent. */
export function fillRpcCache(ggufPath: string, sha256: string, dir: string): CacheIndex {
  mkdirSync(dir, { recursive: true });
  const idx = indexPath(dir, sha256);
  if (existsSync(idx)) {
    const prev = JSON.parse(readFileSync(idx, 'utf8')) as CacheIndex;
    if (prev.files.every((f) => existsSync(join(dir, f.name)))) return prev;
  }
  const g = readGgufFile(ggufPath);
  const files: CacheIndex['files'] = [];
  const fd = openSync(ggufPath, 'r');
  const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
  try {
    for (const t of g.tensors) {
      if (t.bytes <= RPC_HASH_THRESHOLD) continue;
      const tmp = join(dir, `.relay-${process.pid}.tmp`);
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
      files.push({ name, size: t.bytes });
    }
  } finally {
    closeSync(fd);
  }
  const index = { sha256, files };
  writeFileSync(idx, JSON.stringify(index));
  return index;
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
