import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { bufferSource, deriveModelInfo, GgufValueType, parseGguf, readGgufFile, type ByteSource, type GgufValue } from '../../src/main/core/gguf/index.js';
import { encodeHeader, writeGguf, type MetaEntry, type TensorSpec } from '../fixtures/gguf-writer.js';
import { ALL_TYPES, SMALL_TENSORS, smallGguf } from '../fixtures/small-gguf.js';

const T = GgufValueType;

function expectCode(fn: () => unknown, code: string): { offset: number } {
  try {
    fn();
  } catch (err) {
    assert.ok(isRelayError(err), `expected a RelayError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    assert.equal(typeof err.details.offset, 'number');
    assert.match(err.message, /byte offset \d+/);
    return { offset: err.details.offset as number };
  }
  assert.fail(`expected ${code}`);
}

describe('GGUF reader', () => {
  it('reads back every metadata value type the writer wrote', () => {
    const f = parseGguf(bufferSource(smallGguf()));
    assert.equal(f.version, 3);
    assert.equal(f.metadata.size, ALL_TYPES.length);
    for (const [key, v] of ALL_TYPES) {
      const got = f.metadata.get(key) as GgufValue;
      assert.equal(got.type, v.type, key);
      if (v.type === T.FLOAT32 || (v.type === T.ARRAY && v.itemType === T.FLOAT32)) {
        assert.deepEqual(got.value, v.value, key); // chosen values are exact in f32
      } else {
        assert.deepEqual(got.value, v.value, key);
      }
      if (v.type === T.ARRAY) assert.equal((got as { itemType: number }).itemType, v.itemType, key);
    }
  });

  it('reads the tensor table with types, sizes and aligned offsets', () => {
    for (const alignment of [32, 64, 256]) {
      const buf = smallGguf(ALL_TYPES, SMALL_TENSORS, alignment);
      const f = parseGguf(bufferSource(buf));
      assert.equal(f.alignment, alignment);
      assert.equal(f.dataOffset % alignment, 0);
      assert.deepEqual(
        f.tensors.map((t) => [t.name, t.typeName, t.bytes]),
        [
          ['a', 'f32', 64],
          ['b', 'f16', 128],
          ['q', 'q8_0', 3 * 34],
        ],
      );
      for (const t of f.tensors) assert.equal(t.offset % alignment, 0);
      // The data really is where the table says: tensor q was filled with 3s.
      const q = f.tensors[2]!;
      assert.equal(buf[f.dataOffset + q.offset], 3);
      assert.equal(buf[f.dataOffset + q.offset + q.bytes - 1], 3);
    }
  });

  it('reads a v2 file (same layout as v3 for little-endian files)', () => {
    const buf = smallGguf();
    buf.writeUInt32LE(2, 4);
    assert.equal(parseGguf(bufferSource(buf)).version, 2);
  });

  it('reads only header bytes, never the whole file', () => {
    // 64 MiB of tensor data behind a small header: the reader must not touch it.
    const big: TensorSpec[] = [{ name: 'big', dims: [4096, 4096], type: 0, fill: () => undefined }];
    const { header } = encodeHeader(ALL_TYPES, big);
    const size = header.byteLength + 4096 * 4096 * 4;
    let bytesRead = 0;
    let furthest = 0;
    const src: ByteSource = {
      size,
      read(offset, length) {
        const end = Math.min(offset + length, header.byteLength);
        bytesRead += Math.max(0, end - offset);
        furthest = Math.max(furthest, offset + length);
        return header.subarray(offset, end);
      },
    };
    // The source returns short reads past the header: a reader that wanted data bytes would fail here.
    const f = parseGguf(src);
    assert.equal(f.tensors[0]!.bytes, 64 * 1024 * 1024);
    assert.ok(bytesRead <= header.byteLength);
    assert.equal(f.fileSize, size);
  });

  it('refuses a non-GGUF file with GGUF_BAD_MAGIC at offset 0', () => {
    const { offset } = expectCode(() => parseGguf(bufferSource(Buffer.from('{"not":"gguf"} and some more bytes'))), 'GGUF_BAD_MAGIC');
    assert.equal(offset, 0);
  });

  it('refuses unsupported versions with the version offset', () => {
    for (const v of [0, 1, 4, 0xffffffff]) {
      const buf = smallGguf();
      buf.writeUInt32LE(v, 4);
      assert.equal(expectCode(() => parseGguf(bufferSource(buf)), 'GGUF_UNSUPPORTED_VERSION').offset, 4);
    }
  });

  it('refuses every truncation of the header with GGUF_TRUNCATED and an offset inside the file', () => {
    const buf = smallGguf();
    const f = parseGguf(bufferSource(buf));
    // Past the end of the last tensor's bytes only alignment padding remains: cutting that loses nothing.
    const dataEnd = Math.max(...f.tensors.map((t) => f.dataOffset + t.offset + t.bytes));
    for (let cut = 0; cut < dataEnd; cut += cut < f.dataOffset ? 1 : 7) {
      const { offset } = expectCode(() => parseGguf(bufferSource(buf.subarray(0, cut))), 'GGUF_TRUNCATED');
      assert.ok(offset <= cut, `offset ${offset} past the cut ${cut}`);
    }
  });

  it('refuses counts and lengths the file cannot hold, without allocating them', () => {
    const buf = smallGguf();
    const huge = (at: number, v: bigint, code: string): void => {
      const b = Buffer.from(buf);
      b.writeBigUInt64LE(v, at);
      assert.equal(expectCode(() => parseGguf(bufferSource(b)), code).offset, at);
    };
    huge(8, 1n << 62n, 'GGUF_LIMIT_EXCEEDED'); // tensor count
    huge(16, 0xffffffffffffffffn, 'GGUF_LIMIT_EXCEEDED'); // kv count
    huge(24, 1n << 40n, 'GGUF_LIMIT_EXCEEDED'); // first key's length
  });

  it('refuses an array whose count exceeds the bytes left', () => {
    const meta: MetaEntry[] = [['arr', { type: T.ARRAY, itemType: T.UINT32, value: [1, 2, 3] }]];
    const buf = smallGguf(meta, []);
    // header(24) + key len(8) + "arr"(3) + type(4) + item type(4) = 43: the count is there.
    buf.writeBigUInt64LE(1n << 50n, 43);
    assert.equal(expectCode(() => parseGguf(bufferSource(buf)), 'GGUF_LIMIT_EXCEEDED').offset, 43);
  });

  it('refuses unknown value types, nested arrays, bad bools, bad UTF-8 and duplicates', () => {
    const one = (v: GgufValue): Buffer => smallGguf([['k', v]], []);
    const typeAt = 24 + 8 + 1; // after header, key length and "k"
    let b = one({ type: T.UINT32, value: 1 });
    b.writeUInt32LE(13, typeAt);
    expectCode(() => parseGguf(bufferSource(b)), 'GGUF_BAD_VALUE_TYPE');

    b = one({ type: T.ARRAY, itemType: T.UINT8, value: [1] });
    b.writeUInt32LE(T.ARRAY, typeAt + 4);
    expectCode(() => parseGguf(bufferSource(b)), 'GGUF_BAD_VALUE_TYPE');

    b = one({ type: T.BOOL, value: true });
    b[typeAt + 4] = 7;
    expectCode(() => parseGguf(bufferSource(b)), 'GGUF_BAD_VALUE_TYPE');

    b = one({ type: T.STRING, value: 'ab' });
    b[typeAt + 4 + 8] = 0xff;
    expectCode(() => parseGguf(bufferSource(b)), 'GGUF_BAD_UTF8');

    expectCode(
      () =>
        parseGguf(
          bufferSource(
            smallGguf(
              [
                ['k', { type: T.UINT8, value: 1 }],
                ['k', { type: T.UINT8, value: 2 }],
              ],
              [],
            ),
          ),
        ),
      'GGUF_DUPLICATE',
    );
    const dupT: TensorSpec[] = [SMALL_TENSORS[0]!, SMALL_TENSORS[0]!];
    expectCode(() => parseGguf(bufferSource(smallGguf([], dupT))), 'GGUF_DUPLICATE');
  });

  it('refuses bad tensors: unknown type, too many dims, misaligned offset, data past EOF', () => {
    expectCode(() => parseGguf(bufferSource(smallGguf([], [{ name: 'x', dims: [1, 1, 1, 1, 1], type: 0, fill: () => undefined }]))), 'GGUF_BAD_TENSOR');
    const bad = smallGguf([], [SMALL_TENSORS[0]!]);
    // tensor info: header 24, name len 8 + "a" 1, n_dims 4, dims 16, then type.
    const typeAt = 24 + 9 + 4 + 16;
    const b1 = Buffer.from(bad);
    b1.writeUInt32LE(4, typeAt); // removed Q4_2
    expectCode(() => parseGguf(bufferSource(b1)), 'GGUF_BAD_TENSOR');
    const b2 = Buffer.from(bad);
    b2.writeBigUInt64LE(3n, typeAt + 4);
    expectCode(() => parseGguf(bufferSource(b2)), 'GGUF_BAD_ALIGNMENT');
    const b3 = Buffer.from(bad);
    b3.writeBigUInt64LE(1024n, typeAt + 4);
    expectCode(() => parseGguf(bufferSource(b3)), 'GGUF_TRUNCATED');
    expectCode(() => parseGguf(bufferSource(smallGguf([['general.alignment', { type: T.UINT32, value: 48 }]], []))), 'GGUF_BAD_ALIGNMENT');
  });

  it('reads a file from disk and names the path in errors', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-gguf-'));
    const p = join(dir, 'm.gguf');
    writeGguf(p, ALL_TYPES, SMALL_TENSORS);
    assert.equal(readGgufFile(p).tensors.length, 3);
    const missing = join(dir, 'nope.gguf');
    assert.throws(
      () => readGgufFile(missing),
      (e: unknown) => isRelayError(e, 'IO_ERROR') && e.message.includes(missing),
    );
  });
});

describe('deriveModelInfo', () => {
  const base = (arch: string, extra: MetaEntry[]): MetaEntry[] => [
    ['general.architecture', { type: T.STRING, value: arch }],
    [`${arch}.block_count`, { type: T.UINT32, value: 32 }],
    [`${arch}.embedding_length`, { type: T.UINT32, value: 4096 }],
    [`${arch}.attention.head_count`, { type: T.UINT32, value: 32 }],
    [`${arch}.context_length`, { type: T.UINT32, value: 8192 }],
    ...extra,
  ];
  const info = (meta: MetaEntry[]) => deriveModelInfo(parseGguf(bufferSource(smallGguf(meta, SMALL_TENSORS))));

  it("next-token (MTP) layers: counted where the last block holds nextn.eh_proj (llama.cpp's own test), else 0", () => {
    const head: TensorSpec = { name: 'blk.31.nextn.eh_proj.weight', dims: [8], type: 0, fill: (b) => b.fill(0) };
    const elsewhere: TensorSpec = { ...head, name: 'blk.30.nextn.eh_proj.weight' };
    const nextn: MetaEntry = ['qwen35.nextn_predict_layers', { type: T.UINT32, value: 1 }];
    const of = (tensors: TensorSpec[], meta: MetaEntry[] = [nextn]) => deriveModelInfo(parseGguf(bufferSource(smallGguf(base('qwen35', meta), [...SMALL_TENSORS, ...tensors])))).mtpLayers;
    assert.equal(of([head]), 1);
    assert.equal(of([head], []), 1, 'the tensor alone: one layer, as llama.cpp reads it');
    assert.equal(of([elsewhere]), 0, 'not in the last block');
    assert.equal(of([]), 0, 'the key without the tensor');
  });

  it('computes kv_bytes_per_token = layers × kv_heads × (k + v) × 2, defaulting k/v to embd / heads', () => {
    const i = info(base('llama', [['llama.attention.head_count_kv', { type: T.UINT32, value: 8 }]]));
    assert.equal(i.keyLength, 128);
    assert.equal(i.valueLength, 128);
    assert.equal(i.kvBytesPerToken, 32 * 8 * (128 + 128) * 2);
    assert.equal(i.contextLength, 8192);
    assert.equal(i.isMoe, false);
    assert.equal(i.tensorBytes, 64 + 128 + 102);
  });

  it('uses explicit key/value lengths and per-layer kv head arrays', () => {
    const i = info(
      base('qwen3', [
        ['qwen3.attention.head_count_kv', { type: T.ARRAY, itemType: T.INT32, value: new Array(32).fill(0).map((_, l) => (l % 2 ? 4 : 8)) }],
        ['qwen3.attention.key_length', { type: T.UINT32, value: 192 }],
        ['qwen3.attention.value_length', { type: T.UINT32, value: 128 }],
      ]),
    );
    assert.equal(i.kvBytesPerToken, 16 * (8 + 4) * (192 + 128) * 2);
    assert.equal(i.headCountKv, 8);
  });

  it('defaults head_count_kv to head_count, as llama.cpp does', () => {
    assert.equal(info(base('llama', [])).kvBytesPerToken, 32 * 32 * 256 * 2);
  });

  it('gives no kv estimate when the header lacks the fields', () => {
    const i = info([['general.architecture', { type: T.STRING, value: 'llama' }]]);
    assert.equal(i.kvBytesPerToken, null);
    assert.equal(i.blockCount, null);
    assert.equal(deriveModelInfo(parseGguf(bufferSource(smallGguf([], [])))).architecture, null);
  });

  it('is MoE only when both expert_count and expert_used_count are set', () => {
    const e = (count: number | null, used: number | null) =>
      info(
        base('qwen3moe', [
          ...(count === null ? [] : [['qwen3moe.expert_count', { type: T.UINT32, value: count }] as MetaEntry]),
          ...(used === null ? [] : [['qwen3moe.expert_used_count', { type: T.UINT32, value: used }] as MetaEntry]),
        ]),
      );
    assert.equal(e(128, 8).isMoe, true);
    assert.deepEqual([e(128, 8).expertCount, e(128, 8).expertUsedCount], [128, 8]);
    assert.equal(e(128, null).isMoe, false);
    assert.equal(e(null, 8).isMoe, false);
    assert.equal(e(0, 8).isMoe, false);
    assert.equal(e(128, 0).isMoe, false);
  });

  it('never divides by a zero head count', () => {
    const meta = base('llama', []).map(([k, v]): MetaEntry => (k === 'llama.attention.head_count' ? [k, { type: T.UINT32, value: 0 }] : [k, v]));
    const i = info(meta);
    assert.equal(i.keyLength, null);
    assert.equal(i.kvBytesPerToken, null);
  });
});
