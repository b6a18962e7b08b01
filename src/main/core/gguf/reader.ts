import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { ggmlType, GgufValueType, minEncodedSize, SCALAR_SIZE, type GgufScalarType, type GgufScalar, type GgufValue } from './types.js';

/**
 * Limits that keep a hostile header from causing a huge allocation or a long loop. Every count is also
 * checked against the bytes left in the file, so these only bound what a plausible file could claim.
 */
export interface GgufLimits {
  readonly maxKeyBytes: number;
  readonly maxStringBytes: number;
  readonly maxTensorDims: number;
  readonly maxTensors: number;
  readonly maxKeys: number;
  readonly maxArrayItems: number;
}

export const DEFAULT_GGUF_LIMITS: GgufLimits = {
  maxKeyBytes: 65_535,
  maxStringBytes: 64 * 1024 * 1024,
  maxTensorDims: 4, // GGML_MAX_DIMS
  maxTensors: 1 << 20,
  maxKeys: 1 << 20,
  // ggml's reader allows 2^30; relay materialises arrays as JS values, so it stops at 2^24 (16.7M items: ten
  // times the largest tokenizer arrays of real models) instead of letting a crafted header take gigabytes.
  maxArrayItems: 1 << 24,
};

export interface GgufTensorInfo {
  readonly name: string;
  /** ne[0] first, as ggml stores it. */
  readonly dims: readonly number[];
  readonly type: number;
  readonly typeName: string;
  /** Offset relative to the start of the tensor data section. */
  readonly offset: number;
  readonly bytes: number;
}

export interface GgufFile {
  readonly version: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: readonly GgufTensorInfo[];
  readonly alignment: number;
  /** Absolute file offset of the tensor data section. */
  readonly dataOffset: number;
  readonly fileSize: number;
  /** Bytes of the header (magic through the padding before tensor data). */
  readonly headerBytes: number;
}

/** Random-access bytes. The reader asks only for header bytes, in order, a window at a time. */
export interface ByteSource {
  readonly size: number;
  read(offset: number, length: number): Uint8Array;
}

export function bufferSource(buf: Uint8Array): ByteSource {
  return {
    size: buf.byteLength,
    read: (offset, length) => buf.subarray(offset, Math.min(offset + length, buf.byteLength)),
  };
}

const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
const DEFAULT_ALIGNMENT = 32;
const WINDOW_BYTES = 1 << 20;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A forward-only cursor over a ByteSource that keeps one window of bytes in memory. */
class Cursor {
  pos = 0;
  private window: Uint8Array = new Uint8Array(0);
  private view = new DataView(this.window.buffer);
  private windowStart = 0;

  constructor(
    private readonly src: ByteSource,
    readonly path: string | undefined,
  ) {}

  get remaining(): number {
    return this.src.size - this.pos;
  }

  fail(code: ErrorCode, what: string, offset = this.pos): never {
    const where = this.path ? `${this.path}: ` : '';
    throw new RelayError(code, `${where}${what} at byte offset ${offset}`, { offset, path: this.path });
  }

  /** Make `n` bytes at pos addressable; returns their index in the window. */
  private need(n: number, what: string): number {
    if (n > this.remaining) this.fail(ErrorCode.GGUF_TRUNCATED, `file ends inside ${what} (needs ${n} bytes, ${this.remaining} left)`);
    const rel = this.pos - this.windowStart;
    if (rel >= 0 && rel + n <= this.window.byteLength) return rel;
    const len = Math.min(Math.max(n, WINDOW_BYTES), this.remaining);
    const bytes = this.src.read(this.pos, len);
    if (bytes.byteLength < n) this.fail(ErrorCode.GGUF_TRUNCATED, `short read inside ${what}`);
    this.window = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.windowStart = this.pos;
    return 0;
  }

  u8(what: string): number {
    const i = this.need(1, what);
    this.pos += 1;
    return this.view.getUint8(i);
  }
  u32(what: string): number {
    const i = this.need(4, what);
    this.pos += 4;
    return this.view.getUint32(i, true);
  }
  u64(what: string): bigint {
    const i = this.need(8, what);
    this.pos += 8;
    return this.view.getBigUint64(i, true);
  }
  /**
   * A u64 count or length. Over `absMax` it is absurd (GGUF_LIMIT_EXCEEDED); under it but more than the
   * bytes left can hold (`fits`), the file was cut short (GGUF_TRUNCATED). Either way nothing is allocated.
   */
  count(what: string, absMax: number, fits = Number.MAX_SAFE_INTEGER): number {
    const at = this.pos;
    const v = this.u64(what);
    if (v > BigInt(absMax)) this.fail(ErrorCode.GGUF_LIMIT_EXCEEDED, `${what} ${v} exceeds the limit ${absMax}`, at);
    if (v > BigInt(fits)) this.fail(ErrorCode.GGUF_TRUNCATED, `${what} ${v} is more than the ${this.remaining} bytes left can hold`, at);
    return Number(v);
  }

  scalar(type: number, what: string): GgufScalar {
    const size = SCALAR_SIZE[type];
    if (size === undefined) this.fail(ErrorCode.GGUF_BAD_VALUE_TYPE, `${what} has scalar type ${type}`);
    const i = this.need(size, what);
    this.pos += size;
    const v = this.view;
    switch (type) {
      case GgufValueType.UINT8:
        return v.getUint8(i);
      case GgufValueType.INT8:
        return v.getInt8(i);
      case GgufValueType.UINT16:
        return v.getUint16(i, true);
      case GgufValueType.INT16:
        return v.getInt16(i, true);
      case GgufValueType.UINT32:
        return v.getUint32(i, true);
      case GgufValueType.INT32:
        return v.getInt32(i, true);
      case GgufValueType.FLOAT32:
        return v.getFloat32(i, true);
      case GgufValueType.BOOL: {
        const b = v.getUint8(i);
        if (b > 1) this.fail(ErrorCode.GGUF_BAD_VALUE_TYPE, `${what} is a bool with byte ${b}`, this.pos - 1);
        return b === 1;
      }
      case GgufValueType.UINT64:
        return v.getBigUint64(i, true);
      case GgufValueType.INT64:
        return v.getBigInt64(i, true);
      default:
        return v.getFloat64(i, true); // FLOAT64
    }
  }

  string(what: string, maxBytes: number): string {
    const at = this.pos;
    const len = this.count(`${what} length`, maxBytes, this.remaining);
    if (len === 0) return '';
    const i = this.need(len, what);
    this.pos += len;
    try {
      return utf8.decode(this.window.subarray(i, i + len));
    } catch {
      return this.fail(ErrorCode.GGUF_BAD_UTF8, `${what} is not valid UTF-8`, at);
    }
  }

  skipTo(offset: number, what: string): void {
    if (offset > this.src.size) this.fail(ErrorCode.GGUF_TRUNCATED, `file ends before ${what}`);
    this.pos = offset;
  }
}

function readValue(c: Cursor, type: number, what: string, limits: GgufLimits): GgufValue {
  if (type === GgufValueType.STRING) return { type, value: c.string(what, limits.maxStringBytes) };
  if (type !== GgufValueType.ARRAY) {
    if (SCALAR_SIZE[type] === undefined) c.fail(ErrorCode.GGUF_BAD_VALUE_TYPE, `${what} has unknown value type ${type}`, c.pos - 4);
    return { type: type as GgufScalarType, value: c.scalar(type, what) };
  }
  const typeAt = c.pos;
  const itemType = c.u32(`${what} item type`);
  // Arrays of arrays are refused, as ggml's own gguf reader refuses them: llama.cpp could not load the file.
  if (itemType === GgufValueType.ARRAY || (itemType !== GgufValueType.STRING && SCALAR_SIZE[itemType] === undefined)) {
    c.fail(ErrorCode.GGUF_BAD_VALUE_TYPE, `${what} has invalid array item type ${itemType}`, typeAt);
  }
  const n = c.count(`${what} item count`, limits.maxArrayItems, Math.floor(c.remaining / minEncodedSize(itemType)));
  const items: GgufScalar[] = new Array(n);
  for (let k = 0; k < n; k++) {
    items[k] = itemType === GgufValueType.STRING ? c.string(`${what}[${k}]`, limits.maxStringBytes) : c.scalar(itemType, `${what}[${k}]`);
  }
  return { type, itemType: itemType as GgufScalarType, value: items };
}

/**
 * Parse a GGUF header (v2 or v3): metadata, tensor table and alignment. Reads only header bytes.
 * Every malformed input throws a RelayError with a GGUF_* code and the byte offset; nothing else escapes.
 */
export function parseGguf(src: ByteSource, opts: { path?: string; limits?: GgufLimits } = {}): GgufFile {
  const limits = opts.limits ?? DEFAULT_GGUF_LIMITS;
  const c: Cursor = new Cursor(src, opts.path);
  const magic = c.u32('magic');
  if (magic !== GGUF_MAGIC) c.fail(ErrorCode.GGUF_BAD_MAGIC, 'not a GGUF file (bad magic)', 0);
  const version = c.u32('version');
  if (version !== 2 && version !== 3) c.fail(ErrorCode.GGUF_UNSUPPORTED_VERSION, `GGUF version ${version} is not supported (2 or 3)`, 4);

  // The cheapest possible tensor info is 24 bytes and the cheapest KV 13: the file must hold that many.
  const tensorCount = c.count('tensor count', limits.maxTensors, Math.floor(c.remaining / 24));
  const kvCount = c.count('metadata count', limits.maxKeys, Math.floor(c.remaining / 13));

  const metadata = new Map<string, GgufValue>();
  for (let k = 0; k < kvCount; k++) {
    const keyAt = c.pos;
    const key = c.string(`metadata key #${k}`, limits.maxKeyBytes);
    if (key === '') c.fail(ErrorCode.GGUF_BAD_VALUE_TYPE, `metadata key #${k} is empty`, keyAt);
    if (metadata.has(key)) c.fail(ErrorCode.GGUF_DUPLICATE, `duplicate metadata key "${key}"`, keyAt);
    const type = c.u32(`type of "${key}"`);
    metadata.set(key, readValue(c, type, `"${key}"`, limits));
  }

  let alignment = DEFAULT_ALIGNMENT;
  const al = metadata.get('general.alignment');
  if (al !== undefined) {
    const v = al.value;
    if (al.type !== GgufValueType.UINT32 || typeof v !== 'number' || v === 0 || (v & (v - 1)) !== 0) {
      c.fail(ErrorCode.GGUF_BAD_ALIGNMENT, `general.alignment must be a power-of-two uint32, got ${String(v)}`);
    }
    alignment = v;
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let t = 0; t < tensorCount; t++) {
    const at = c.pos;
    const name = c.string(`tensor #${t} name`, limits.maxKeyBytes);
    if (names.has(name)) c.fail(ErrorCode.GGUF_DUPLICATE, `duplicate tensor "${name}"`, at);
    names.add(name);
    const nDims = c.u32(`"${name}" dimension count`);
    if (nDims > limits.maxTensorDims) c.fail(ErrorCode.GGUF_BAD_TENSOR, `"${name}" has ${nDims} dimensions (max ${limits.maxTensorDims})`, c.pos - 4);
    const dims: number[] = [];
    let elements = 1n;
    for (let d = 0; d < nDims; d++) {
      const ne = c.u64(`"${name}" dim ${d}`);
      elements *= ne;
      if (elements > MAX_SAFE) c.fail(ErrorCode.GGUF_LIMIT_EXCEEDED, `"${name}" has more elements than can be addressed`, c.pos - 8);
      dims.push(Number(ne));
    }
    const typeAt = c.pos;
    const type = c.u32(`"${name}" type`);
    const info = ggmlType(type);
    if (!info) c.fail(ErrorCode.GGUF_BAD_TENSOR, `"${name}" has unknown ggml type ${type}`, typeAt);
    if ((dims[0] ?? 1) % info.blockSize !== 0) {
      c.fail(ErrorCode.GGUF_BAD_TENSOR, `"${name}" row of ${dims[0]} is not a multiple of ${info.name}'s block size ${info.blockSize}`, typeAt);
    }
    const offAt = c.pos;
    const offset = c.count(`"${name}" data offset`, Number.MAX_SAFE_INTEGER);
    if (offset % alignment !== 0) c.fail(ErrorCode.GGUF_BAD_ALIGNMENT, `"${name}" data offset ${offset} is not a multiple of ${alignment}`, offAt);
    const bytes = (Number(elements) / info.blockSize) * info.typeSize;
    tensors.push({ name, dims, type, typeName: info.name, offset, bytes });
  }

  const headerEnd = c.pos;
  const dataOffset = Math.ceil(headerEnd / alignment) * alignment;
  const fileSize = src.size;
  for (const t of tensors) {
    const end = dataOffset + t.offset + t.bytes;
    if (end > fileSize) {
      c.fail(ErrorCode.GGUF_TRUNCATED, `tensor "${t.name}" data ends at ${end}, past the end of the file (${fileSize} bytes)`, fileSize);
    }
  }
  c.skipTo(Math.min(dataOffset, fileSize), 'tensor data');
  return { version, metadata, tensors, alignment, dataOffset, fileSize, headerBytes: dataOffset };
}

/** Read a GGUF file's header from disk without reading its tensor data. */
export function readGgufFile(path: string, limits?: GgufLimits): GgufFile {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new RelayError(ErrorCode.IO_ERROR, `cannot open ${path}: ${(err as Error).message}`, { path }, { cause: err });
  }
  try {
    const size = fstatSync(fd).size;
    const src: ByteSource = {
      size,
      read(offset, length) {
        const buf = Buffer.allocUnsafe(Math.min(length, size - offset));
        let got = 0;
        while (got < buf.byteLength) {
          const n = readSync(fd, buf, got, buf.byteLength - got, offset + got);
          if (n === 0) break;
          got += n;
        }
        return buf.subarray(0, got);
      },
    };
    return parseGguf(src, limits ? { path, limits } : { path });
  } finally {
    closeSync(fd);
  }
}

/** Plain JS value of a metadata entry (arrays become arrays), or undefined. */
export function metaValue(file: GgufFile, key: string): GgufScalar | GgufScalar[] | undefined {
  const v = file.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type === GgufValueType.ARRAY) return v.value;
  return v.value;
}
