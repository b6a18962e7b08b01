import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { deriveModelInfo, GgufValueType, readGgufFile } from '../../src/main/core/gguf/index.js';
import { FIXTURES, type FixtureName } from '../fixtures/models.js';
import { fixture, llama } from '../helpers/llama.js';

/**
 * The oracle is llama.cpp's own Python reader (gguf-py, from the same pinned source) run under Debian's
 * python3 + numpy: an independent implementation of the format that relay's reader must agree with.
 */
interface Dumped {
  architecture: string | null;
  token_count: number | null;
  fields: Record<string, { type: number; item_type?: number; count?: number; value?: string }>;
  tensors: [string, number[], number, number][];
}

function oracle(paths: string[]): Record<string, Dumped> {
  const script = new URL('../../../test/oracle/gguf_dump.py', import.meta.url).pathname;
  const out = execFileSync('/usr/bin/python3', [script, ...paths], {
    env: { ...process.env, PYTHONPATH: llama().ggufPyDir },
    maxBuffer: 256 * 1024 * 1024,
    encoding: 'utf8',
  });
  return JSON.parse(out) as Record<string, Dumped>;
}

function compare(path: string, want: Dumped): void {
  const f = readGgufFile(path);
  const info = deriveModelInfo(f);
  assert.equal(info.architecture, want.architecture, `${path}: architecture`);
  assert.equal(info.tokenCount, want.token_count, `${path}: token count`);
  assert.deepEqual([...f.metadata.keys()], Object.keys(want.fields), `${path}: metadata keys in order`);
  for (const [key, w] of Object.entries(want.fields)) {
    const v = f.metadata.get(key)!;
    assert.equal(v.type, w.type, `${path}: type of ${key}`);
    if (v.type === GgufValueType.ARRAY) {
      assert.equal(v.itemType, w.item_type, `${path}: item type of ${key}`);
      assert.equal(v.value.length, w.count, `${path}: length of ${key}`);
    } else if (w.value !== undefined) {
      assert.equal(v.value, w.value, `${path}: value of ${key}`);
    }
  }
  assert.deepEqual(
    f.tensors.map((t) => [t.name, [...t.dims], t.type, f.dataOffset + t.offset]),
    want.tensors,
    `${path}: tensor table`,
  );
}

describe("GGUF reader agrees with llama.cpp's gguf-py", () => {
  it('on every models/ggml-vocab-*.gguf of the llama.cpp source: architecture, token count, keys, types', () => {
    const dir = llama().vocabDir;
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.gguf'))
      .map((f) => join(dir, f));
    assert.ok(files.length >= 15, `expected the llama.cpp vocab set, found ${files.length}`);
    const want = oracle(files);
    for (const p of files) compare(p, want[p]!);
  });

  it('on the generated fixtures, including their tensor tables', () => {
    const paths = (Object.keys(FIXTURES) as FixtureName[]).map((n) => fixture(n));
    const want = oracle(paths);
    for (const p of paths) compare(p, want[p]!);
  });
});
