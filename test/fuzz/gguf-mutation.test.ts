import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { RelayError } from '../../src/shared/errors.js';
import { bufferSource, parseGguf } from '../../src/main/core/gguf/index.js';
import { smallGguf } from '../fixtures/small-gguf.js';

/**
 * Mutation fuzz: 10,000 corrupted headers. Every parse must either succeed or throw a RelayError with a
 * GGUF_* code and a byte offset: no TypeError, RangeError, hang or huge allocation.
 */
const EDGE_U64 = [0n, 1n, 0x7fffffffn, 0xffffffffn, 1n << 32n, 1n << 53n, 1n << 63n, 0xffffffffffffffffn];

type Mutation =
  | { kind: 'flip'; at: number; xor: number }
  | { kind: 'u64'; at: number; v: bigint }
  | { kind: 'u32'; at: number; v: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'dup'; at: number; len: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), xor: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ kind: fc.constant('u64' as const), at: fc.nat(), v: fc.oneof(fc.constantFrom(...EDGE_U64), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })) }),
  fc.record({ kind: fc.constant('u32' as const), at: fc.nat(), v: fc.oneof(fc.integer({ min: 0, max: 16 }), fc.nat()) }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('dup' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 64 }) }),
);

function apply(base: Buffer, headerEnd: number, muts: Mutation[]): Buffer {
  let b = Buffer.from(base);
  for (const m of muts) {
    const at = m.at % headerEnd; // aim at the header: that is where the parser lives
    switch (m.kind) {
      case 'flip':
        b[at] = (b[at] ?? 0) ^ m.xor;
        break;
      case 'u64':
        if (at + 8 <= b.length) b.writeBigUInt64LE(m.v, at);
        break;
      case 'u32':
        if (at + 4 <= b.length) b.writeUInt32LE(m.v >>> 0, at);
        break;
      case 'truncate':
        b = b.subarray(0, at);
        break;
      case 'dup':
        b = Buffer.concat([b.subarray(0, at), b.subarray(at, at + m.len), b.subarray(at)]);
        break;
    }
  }
  return b;
}

describe('GGUF reader mutation fuzz', () => {
  it('10,000 corrupted headers end in 0 uncaught exceptions', () => {
    const base = smallGguf();
    const headerEnd = parseGguf(bufferSource(base)).dataOffset;
    const codes = new Map<string, number>();
    let uncaught = 0;
    let parsed = 0;
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (muts) => {
        const b = apply(base, headerEnd, muts);
        try {
          parseGguf(bufferSource(b));
          parsed++;
        } catch (err) {
          if (!(err instanceof RelayError) || !err.code.startsWith('GGUF_') || typeof err.details.offset !== 'number') {
            uncaught++;
            throw err; // fast-check shrinks it to the smallest failing mutation
          }
          codes.set(err.code, (codes.get(err.code) ?? 0) + 1);
        }
      }),
      { numRuns: 10_000, seed: 20261129 },
    );
    assert.equal(uncaught, 0);
    // Not vacuous: the mutations reached many different checks, and some files still parsed.
    assert.ok(codes.size >= 6, `codes reached: ${[...codes.keys()].join(', ')}`);
    assert.ok(parsed > 0);
    console.log(`fuzz: ${parsed} parsed, errors by code: ${JSON.stringify(Object.fromEntries(codes))}`);
  });
});
