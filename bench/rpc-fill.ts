/**
 * bench/rpc-fill: how fast a node fills ggml-rpc-server's tensor cache from its own copy of a model.
 *  - FNV-1a 64 MB/s: the JavaScript oracle, the WebAssembly hasher on one thread, and the WebAssembly hasher on
 *    every worker at once (the fill's figure: tensors are hashed in parallel);
 *  - the fill of a BENCH_FILL_GB (default 4) GiB GGUF, sparse on disk, with 1 worker and with the default
 *    number, against reading the same file (the "disk read time" the issue compares with), first and again.
 * `npm run bench -- rpc-fill`.
 */
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { GGML_TYPE_F32 } from '../src/main/core/gguf/index.js';
import { FNV_OFFSET, FNV_WASM_BUFFER, WasmFnv, fnv1a64Update } from '../src/main/core/llama/fnv.js';
import { fillRpcCacheOffThread } from '../src/main/core/node/cache/rpc-cache.js';
import { str, u32, writeSparseGguf } from '../test/fixtures/gguf-writer.js';
import { reportTarget } from './targets.js';

const GB = Number(process.env.BENCH_FILL_GB ?? 4);
const MB = 1e6;
const threads = Math.min(availableParallelism(), 4);

function jsRate(): number {
  const buf = Buffer.alloc(64 * 1024 * 1024, 3);
  const t0 = performance.now();
  fnv1a64Update(FNV_OFFSET, buf);
  return buf.length / MB / ((performance.now() - t0) / 1000);
}

function wasmRate(bytes = 1024 * 1024 * 1024): number {
  const h = new WasmFnv();
  h.buffer.fill(5);
  const t0 = performance.now();
  for (let done = 0; done < bytes; done += FNV_WASM_BUFFER) h.update(FNV_WASM_BUFFER);
  return bytes / MB / ((performance.now() - t0) / 1000);
}

/** Every worker hashes `bytes` at once; aggregate MB/s. */
async function parallelWasmRate(n: number, bytes = 1024 * 1024 * 1024): Promise<number> {
  const src = `const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.url).then(({ WasmFnv, FNV_WASM_BUFFER }) => {
      const h = new WasmFnv(); h.buffer.fill(5);
      parentPort.postMessage('ready');
      parentPort.once('message', () => { for (let d = 0; d < workerData.bytes; d += FNV_WASM_BUFFER) h.update(FNV_WASM_BUFFER); parentPort.postMessage(h.hex()); });
    });`;
  const url = new URL('../src/main/core/llama/fnv.js', import.meta.url).href;
  const ws = Array.from({ length: n }, () => new Worker(src, { eval: true, workerData: { url, bytes } }));
  await Promise.all(ws.map((w) => new Promise((r) => w.once('message', r))));
  const t0 = performance.now();
  await Promise.all(
    ws.map(
      (w) =>
        new Promise((r) => {
          w.once('message', r);
          w.postMessage('go');
        }),
    ),
  );
  const s = (performance.now() - t0) / 1000;
  await Promise.all(ws.map((w) => w.terminate()));
  return (n * bytes) / MB / s;
}

function readSeconds(path: string): number {
  const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
  const fd = openSync(path, 'r');
  const t0 = performance.now();
  try {
    for (let off = 0; ;) {
      const n = readSync(fd, buf, 0, buf.length, off);
      if (n <= 0) break;
      off += n;
    }
  } finally {
    closeSync(fd);
  }
  return (performance.now() - t0) / 1000;
}

/** Write `size` bytes to a new file in 4 MiB writes (the cache files hold every byte once more): seconds. */
function writeSeconds(path: string, size: number): number {
  const buf = Buffer.alloc(4 * 1024 * 1024, 1);
  const fd = openSync(path, 'w');
  const t0 = performance.now();
  try {
    for (let off = 0; off < size; off += buf.length) writeSync(fd, buf, 0, Math.min(buf.length, size - off));
  } finally {
    closeSync(fd);
  }
  const s = (performance.now() - t0) / 1000;
  rmSync(path);
  return s;
}

const dir = mkdtempSync(join(tmpdir(), 'relay-bench-fill-'));
try {
  const layers = Math.max(1, Math.round(GB * 4)); // 256 MiB tensors
  const path = join(dir, 'model.gguf');
  const size = writeSparseGguf(
    path,
    [
      ['general.architecture', str('llama')],
      ['llama.block_count', u32(layers)],
    ],
    Array.from({ length: layers }, (_, i) => ({ name: `blk.${i}.ffn_up.weight`, dims: [65536, 1024], type: GGML_TYPE_F32 })),
  );
  const js = jsRate();
  const wasm = wasmRate();
  const par = await parallelWasmRate(threads);
  const cold = readSeconds(path);
  const read = readSeconds(path); // the fills below read from the page cache too
  const fill = async (n: number): Promise<number> => {
    const out = join(dir, `rpc-${n}`);
    const t0 = performance.now();
    await fillRpcCacheOffThread(path, 'f'.repeat(64), out, null, () => true, n);
    const s = (performance.now() - t0) / 1000;
    rmSync(out, { recursive: true, force: true });
    return s;
  };
  const write = writeSeconds(join(dir, 'write-floor'), size);
  const one = await fill(1);
  const many = await fill(threads);
  const gb = (size / 1024 ** 3).toFixed(2);
  console.log(`machine: ${availableParallelism()} cores; model ${gb} GiB sparse GGUF, ${layers} tensors of 256 MiB\n`);
  console.log('| figure | value | note |');
  console.log('| --- | --- | --- |');
  console.log(`| FNV-1a 64, JavaScript (32-bit steps) | ${js.toFixed(0)} MB/s | the oracle |`);
  console.log(`| FNV-1a 64, WebAssembly, 1 thread | ${wasm.toFixed(0)} MB/s | ${(wasm / js).toFixed(1)}× JavaScript |`);
  console.log(`| FNV-1a 64, WebAssembly, ${threads} workers at once | ${par.toFixed(0)} MB/s | aggregate |`);
  console.log(`| read the file, first time | ${cold.toFixed(2)} s | ${(size / MB / cold).toFixed(0)} MB/s |`);
  console.log(`| read the file again (page cache, as the fills read it) | ${read.toFixed(2)} s | ${(size / MB / read).toFixed(0)} MB/s |`);
  console.log(`| write the same bytes once (4 MiB writes, no fsync) | ${write.toFixed(2)} s | ${(size / MB / write).toFixed(0)} MB/s |`);
  console.log(`| fill, 1 worker | ${one.toFixed(2)} s | ${(one / cold).toFixed(2)}× first read, ${(one / read).toFixed(2)}× page-cache read |`);
  console.log(`| fill, ${threads} workers | ${many.toFixed(2)} s | ${(many / cold).toFixed(2)}× first read, ${(many / read).toFixed(2)}× page-cache read, ${(size / MB / many).toFixed(0)} MB/s |`);
  // "Disk read time": reading the file when it is not in the page cache (the first read). For this sparse file
  // that is the kernel filling pages with zeros, faster than many disks: a strict stand-in.
  reportTarget(
    `rpc-cache fill of ${gb} GiB (wall) ÷ first read of the file`,
    `${(many / cold).toFixed(2)}× (${many.toFixed(1)} s; ${(many / read).toFixed(1)}× a page-cache read)`,
    '≤ 1.2×',
    many / cold <= 1.2,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
