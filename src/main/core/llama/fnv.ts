/**
 * FNV-1a 64, the hash ggml-rpc names its cache files by (ggml-rpc.cpp `fnv_hash`).
 *
 * FNV-1a is one xor and one 64-bit multiply per byte, each waiting on the last: ~4 cycles a byte on any CPU,
 * ~730 MB/s for gcc -O2 on the 2-core EPYC this was written on. JavaScript has no 64-bit integer multiply short
 * of BigInt, so the hash runs in a WebAssembly function (i64.mul) that reaches the C figure; several tensors are
 * hashed by several workers at once when more throughput is wanted (rpc-cache.ts). `fnv1a64Update` below is the
 * same hash in plain 32-bit JavaScript steps, kept as the oracle the WASM one is tested against.
 */

/** The part of the WebAssembly global this file uses (the project's lib has no DOM or wasm typings). */
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: Record<string, unknown> };
};

export type FnvState = [hi: number, lo: number];
export const FNV_OFFSET: FnvState = [0xcbf29ce4, 0x84222325];
const PRIME = 0x100000001b3n;

/**
 * FNV-1a 64 over `data`, continuing from `state`. Prime 2^40 + 0x1b3: state × prime = state × 0x1b3 + (lo << 40);
 * the low half's product is split in 16-bit halves so every step is exact 32-bit integer arithmetic.
 */
export function fnv1a64Update(state: FnvState, data: Uint8Array): FnvState {
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

export function fnvHex([hi, lo]: FnvState): string {
  return hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

// ---- the WebAssembly module, assembled here (no toolchain needed) ----
// (func (export "fnv") (param $ptr i32) (param $len i32) (param $h i64) (result i64)
//   ;; 8 bytes per round: one i64.load, then for each byte: h = (h ^ ((w >> 8k) & 0xff)) * PRIME
//   ;; then the remaining len % 8 bytes one by one; returns h)
// (memory (export "mem") 64)   ;; 4 MiB: the buffer callers read file data into
const uleb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};
const sleb = (v: bigint): number[] => {
  const out: number[] = [];
  for (v = BigInt.asIntN(64, v); ;) {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    if ((v === 0n && !(b & 0x40)) || (v === -1n && b & 0x40)) return [...out, b];
    out.push(b | 0x80);
  }
};
const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
const bytesOf = (s: string): number[] => vec([...s].map((c) => [c.charCodeAt(0)]));

const I32 = 0x7f;
const I64 = 0x7e;
const get = (i: number): number[] => [0x20, i];
const put = (i: number): number[] => [0x21, i];
const i32c = (n: number): number[] => [0x41, ...sleb(BigInt(n))];
const i64c = (n: bigint): number[] => [0x42, ...sleb(n)];
const [I32_ADD, I32_AND, I32_GE_U, I64_XOR, I64_MUL, I64_AND, I64_SHR_U] = [0x6a, 0x71, 0x4f, 0x85, 0x7e, 0x83, 0x88];
const I64_LOAD = [0x29, 3, 0];
const I64_LOAD8_U = [0x31, 0, 0];
const BLOCK = [0x02, 0x40];
const LOOP = [0x03, 0x40];
const END = 0x0b;
const BR_IF = (depth: number): number[] => [0x0d, depth];
const BR = (depth: number): number[] => [0x0c, depth];
const [PTR, LEN, H, STOP, WORD] = [0, 1, 2, 3, 4];

/** `while (ptr < stop) { body; ptr += step }` */
const loopUntilStop = (body: number[], step: number): number[] => [
  ...BLOCK,
  ...LOOP,
  ...get(PTR),
  ...get(STOP),
  I32_GE_U,
  ...BR_IF(1),
  ...body,
  ...get(PTR),
  ...i32c(step),
  I32_ADD,
  ...put(PTR),
  ...BR(0),
  END,
  END,
];
const mixByteOfWord = (k: number): number[] => [...get(H), ...get(WORD), ...(k ? [...i64c(BigInt(8 * k)), I64_SHR_U] : []), ...i64c(0xffn), I64_AND, I64_XOR, ...i64c(PRIME), I64_MUL, ...put(H)];
const mixOneByte = [...get(H), ...get(PTR), ...I64_LOAD8_U, I64_XOR, ...i64c(PRIME), I64_MUL, ...put(H)];
const fnvBody = [
  ...get(PTR),
  ...get(LEN),
  ...i32c(-8),
  I32_AND,
  I32_ADD,
  ...put(STOP), // stop = ptr + (len & ~7)
  ...loopUntilStop([...get(PTR), ...I64_LOAD, ...put(WORD), ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap(mixByteOfWord)], 8),
  ...get(PTR),
  ...get(LEN),
  ...i32c(7),
  I32_AND,
  I32_ADD,
  ...put(STOP), // stop = ptr + (len & 7)
  ...loopUntilStop(mixOneByte, 1),
  ...get(H),
  END,
];
const fnvFunc = [
  ...vec([
    [1, I32],
    [1, I64],
  ]),
  ...fnvBody,
]; // locals: stop (i32), word (i64)
export const FNV_WASM_BUFFER = 4 * 1024 * 1024;
const MODULE = new Uint8Array([
  0x00,
  0x61,
  0x73,
  0x6d,
  0x01,
  0x00,
  0x00,
  0x00,
  ...section(1, vec([[0x60, ...vec([[I32], [I32], [I64]]), ...vec([[I64]])]])), // type: (i32, i32, i64) -> i64
  ...section(3, vec([[0]])), // one function of type 0
  ...section(5, vec([[0x00, ...uleb(FNV_WASM_BUFFER / 65536)]])), // memory: 64 pages
  ...section(
    7,
    vec([
      [...bytesOf('fnv'), 0x00, 0],
      [...bytesOf('mem'), 0x02, 0],
    ]),
  ), // exports
  ...section(10, vec([[...uleb(fnvFunc.length), ...fnvFunc]])), // code
]);
let compiled: object | null = null;

/**
 * An FNV-1a 64 hasher over a 4 MiB buffer that lives in WebAssembly memory: read file data straight into
 * `buffer`, then `update(n)` hashes its first n bytes. One per thread (it owns its memory).
 */
export class WasmFnv {
  readonly buffer: Uint8Array;
  private h = BigInt.asIntN(64, 0xcbf29ce484222325n);
  private readonly fn: (ptr: number, len: number, h: bigint) => bigint;

  constructor() {
    compiled ??= new WebAssembly.Module(MODULE);
    const inst = new WebAssembly.Instance(compiled, {});
    this.fn = inst.exports.fnv as (ptr: number, len: number, h: bigint) => bigint;
    this.buffer = new Uint8Array((inst.exports.mem as { buffer: ArrayBuffer }).buffer, 0, FNV_WASM_BUFFER);
  }

  reset(): this {
    this.h = BigInt.asIntN(64, 0xcbf29ce484222325n);
    return this;
  }

  /** Hash the first `n` bytes of `buffer` into the running state. */
  update(n: number): this {
    if (n < 0 || n > FNV_WASM_BUFFER) throw new RangeError(`update(${n}): the buffer holds ${FNV_WASM_BUFFER} bytes`);
    this.h = this.fn(0, n, this.h);
    return this;
  }

  /** Copy `data` into the buffer piece by piece and hash it (for callers whose bytes are elsewhere). */
  updateFrom(data: Uint8Array): this {
    for (let off = 0; off < data.length; off += FNV_WASM_BUFFER) {
      const piece = data.subarray(off, off + FNV_WASM_BUFFER);
      this.buffer.set(piece);
      this.update(piece.length);
    }
    return this;
  }

  hex(): string {
    return BigInt.asUintN(64, this.h).toString(16).padStart(16, '0');
  }
}
