import { closeSync, mkdirSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { threadId } from 'node:worker_threads';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { readGgufFile } from '../gguf/index.js';
import { WasmFnv } from './fnv.js';

/**
 * The weight tensors ggml-rpc-server caches by hash (its `-c` cache): for any tensor over 10 MiB the head first sends
 * only the 64-bit FNV-1a hash of its bytes, and the server loads `<cache dir>/<16 hex digits>` when present
 * (ggml-rpc.cpp); sent in full, it is saved there under that name. Which of a GGUF's tensors a stage's layers take,
 * their files written (a node that holds the GGUF fills its cache itself: node/cache/rpc-cache.ts) or only named
 * (the hub tells a stage's node which files its load leaves are weights), and a file checked against its name.
 * Synchronous: run from worker threads (rpc-tensors-worker.ts).
 */
export const RPC_HASH_THRESHOLD = 10 * 1024 * 1024;

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

/** A weight file of the cache: its name (the tensor's FNV-1a 64 hash, 16 hex digits), size and tensor. */
export interface WeightFile {
  name: string;
  size: number;
  tensor?: string;
}

/** The tensors over the threshold among `layers` of the GGUF at `ggufPath` (all layers when null), where they lie. */
export function tensorSpans(ggufPath: string, layers: readonly [number, number] | null): TensorSpan[] {
  const g = readGgufFile(ggufPath);
  return g.tensors.filter((t) => t.bytes > RPC_HASH_THRESHOLD && inLayers(t.name, layers)).map((t) => ({ tensor: t.name, start: g.dataOffset + t.offset, bytes: t.bytes }));
}

/** Each span's cache file name: its bytes hashed as the head hashes them (nothing written). */
export function nameTensorSpans(ggufPath: string, spans: readonly TensorSpan[]): WeightFile[] {
  const fnv = new WasmFnv();
  const fd = openSync(ggufPath, 'r');
  try {
    return spans.map((t) => {
      fnv.reset();
      for (let done = 0; done < t.bytes;) {
        const n = readSync(fd, fnv.buffer, 0, Math.min(fnv.buffer.length, t.bytes - done), t.start + done);
        if (n <= 0) throw new RelayError(ErrorCode.IO_ERROR, `${ggufPath} ends inside tensor ${t.tensor}`);
        fnv.update(n);
        done += n;
      }
      return { name: fnv.hex(), size: t.bytes, tensor: t.tensor };
    });
  } finally {
    closeSync(fd);
  }
}

/** Of `files` in `dir`, those there whole: of the size named and whose bytes hash to their name. */
export function wholeFiles(dir: string, files: readonly WeightFile[]): WeightFile[] {
  const fnv = new WasmFnv();
  const out: WeightFile[] = [];
  for (const f of files) {
    if (!/^[0-9a-f]{16}$/.test(f.name)) continue;
    let fd: number;
    try {
      fd = openSync(join(dir, f.name), 'r');
    } catch {
      continue; // not saved (another stage's tensor, or a load that did not send it)
    }
    try {
      fnv.reset();
      let size = 0;
      for (let n = readSync(fd, fnv.buffer, 0, fnv.buffer.length, 0); n > 0; n = readSync(fd, fnv.buffer, 0, fnv.buffer.length, size)) {
        fnv.update(n);
        size += n;
        if (size > f.size) break;
      }
      if (size === f.size && fnv.hex() === f.name) out.push(f);
    } finally {
      closeSync(fd);
    }
  }
  return out;
}

/**
 * Copy each tensor into the cache dir under its FNV-1a 64 name, reading straight into the WASM hasher's buffer
 * (one read, one hash, one write per 4 MiB). Synchronous: run from a worker thread (rpc-tensors-worker.ts).
 */
export function writeTensorFiles(ggufPath: string, spans: readonly TensorSpan[], dir: string): WeightFile[] {
  mkdirSync(dir, { recursive: true });
  const fnv = new WasmFnv();
  const buf = fnv.buffer;
  const files: WeightFile[] = [];
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
