import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { readGgufFile, readModelInfo } from '../../src/main/core/gguf/index.js';
import { ensureFixture, FIXTURES, sha256File } from '../fixtures/models.js';
import { fixture, llama } from '../helpers/llama.js';

describe('fixture generator', () => {
  it('is byte-identical for the same seed and differs for another seed', () => {
    const vocabDir = llama().vocabDir;
    const a = ensureFixture('dense', { vocabDir, dir: mkdtempSync(join(tmpdir(), 'relay-fx-a-')) });
    const b = ensureFixture('dense', { vocabDir, dir: mkdtempSync(join(tmpdir(), 'relay-fx-b-')) });
    const c = ensureFixture('dense', { vocabDir, seed: 2, dir: mkdtempSync(join(tmpdir(), 'relay-fx-c-')) });
    assert.equal(sha256File(a), sha256File(b));
    assert.equal(sha256File(a), sha256File(fixture('dense')));
    assert.notEqual(sha256File(a), sha256File(c));
  });

  it('(a) dense llama fixture has the shape it promises', () => {
    const i = readModelInfo(fixture('dense'));
    const s = FIXTURES.dense;
    assert.deepEqual([i.architecture, i.blockCount, i.embeddingLength, i.headCount, i.headCountKv, i.isMoe, i.tokenCount], ['llama', s.layers, s.embd, s.heads, s.kvHeads, false, 32000]);
    assert.equal(i.kvBytesPerToken, s.layers * s.kvHeads * 2 * (s.embd / s.heads) * 2);
  });

  it('(b) qwen3moe fixture has 8 experts with 2 used', () => {
    const i = readModelInfo(fixture('moe'));
    assert.deepEqual([i.architecture, i.expertCount, i.expertUsedCount, i.isMoe], ['qwen3moe', 8, 2, true]);
  });

  it("(c) large fixture has tensors over ggml-rpc-server's 10 MiB cache threshold", () => {
    const f = readGgufFile(fixture('large'));
    const big = f.tensors.filter((t) => t.bytes > 10 * 1024 * 1024 && t.name.startsWith('blk.'));
    assert.ok(big.length >= 2, `layer tensors over 10 MiB: ${big.map((t) => t.name).join(', ')}`);
  });
});
