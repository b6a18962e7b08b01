import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdtempSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { isRelayError } from '../../src/shared/errors.js';
import { readModelFiles, readModelInfo, splitName, splitPartName, GGML_TYPE_F32 } from '../../src/main/core/gguf/index.js';
import { ModelRegistry } from '../../src/main/core/models/registry.js';
import { discoverFolder } from '../../src/main/core/models/import.js';
import { modelFiles, splitId } from '../../src/main/core/models/files.js';
import { ModelCache } from '../../src/main/core/node/cache/cache.js';
import { Store } from '../../src/main/core/store/store.js';
import { i32, str, u16, u32, writeGguf, writeSplitGguf, type MetaEntry, type TensorSpec } from '../fixtures/gguf-writer.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'relay-split-'));
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

/** A model-shaped GGUF (an architecture and per-layer tensors) small enough to write in a moment. */
const META: MetaEntry[] = [
  ['general.architecture', str('llama')],
  ['llama.block_count', u32(3)],
  ['llama.embedding_length', u32(8)],
  ['llama.attention.head_count', u32(2)],
];
const tensor = (name: string, n: number): TensorSpec => ({ name, dims: [n], type: GGML_TYPE_F32, fill: (out) => out.fill(name.length) });
const TENSORS: TensorSpec[] = [tensor('token_embd.weight', 64), ...[0, 1, 2].flatMap((i) => [tensor(`blk.${i}.attn_q.weight`, 32), tensor(`blk.${i}.ffn_up.weight`, 48)]), tensor('output.weight', 64)];

describe('split GGUFs: read as one model', () => {
  it("names: llama.cpp's -0000i-of-0000N rule, both ways", () => {
    assert.deepEqual(splitName('/m/Qwen3-235B-Q4_K_M-00002-of-00005.gguf'), { prefix: 'Qwen3-235B-Q4_K_M', no: 2, count: 5 });
    assert.equal(splitName('/m/plain.gguf'), null);
    assert.equal(splitName('/m/x-00006-of-00005.gguf'), null);
    assert.equal(splitName('/m/x-0001-of-0005.gguf'), null);
    assert.equal(splitPartName('model', 3, 12), 'model-00003-of-00012.gguf');
  });

  it('the first part reads every part: tensors and bytes as the unsplit file, the files in load order', () => {
    const dir = tmp();
    const whole = join(dir, 'whole.gguf');
    writeGguf(whole, META, TENSORS);
    const paths = writeSplitGguf(dir, 'm', META, TENSORS, 3);
    const r = readModelFiles(paths[0]!);
    assert.deepEqual(r.paths, paths);
    const one = readModelInfo(whole);
    assert.equal(r.info.tensorCount, one.tensorCount);
    assert.equal(r.info.tensorBytes, one.tensorBytes);
    assert.equal(r.info.architecture, 'llama');
    assert.equal(r.info.blockCount, 3);
    assert.equal(
      r.info.fileSize,
      paths.reduce((s, p) => s + readFileSync(p).length, 0),
    );
    assert.deepEqual(readModelFiles(whole).paths, [whole]);
  });

  it('a later part alone, a missing part, parts out of order or a wrong tensor total: GGUF_BAD_SPLIT naming the fix', () => {
    const dir = tmp();
    const paths = writeSplitGguf(dir, 'm', META, TENSORS, 3);
    assert.throws(
      () => readModelFiles(paths[1]!),
      (e: unknown) => isRelayError(e, 'GGUF_BAD_SPLIT') && /give its first part \(m-00001-of-00003\.gguf\)/.test(e.message),
    );
    // Parts 2 and 3 swapped on disk: each file's split.no says where it belongs.
    renameSync(paths[1]!, join(dir, 'tmp'));
    renameSync(paths[2]!, paths[1]!);
    renameSync(join(dir, 'tmp'), paths[2]!);
    assert.throws(
      () => readModelFiles(paths[0]!),
      (e: unknown) => isRelayError(e, 'GGUF_BAD_SPLIT') && /should be part 2 of 3 but its header says part 3/.test(e.message),
    );
    renameSync(paths[1]!, paths[2]!); // part 3 back in its place, part 2 gone
    assert.throws(
      () => readModelFiles(paths[0]!),
      (e: unknown) => isRelayError(e, 'GGUF_BAD_SPLIT') && /part 2 of 3 is missing/.test(e.message),
    );
    // A header that declares more tensors than its parts hold.
    const d2 = tmp();
    const first = writeSplitGguf(d2, 'n', META, TENSORS, 2)[0]!;
    writeSplitGguf(d2, 'n', META, TENSORS.slice(0, -1), 2); // the second part loses a tensor; the first is rewritten with its own total
    writeGguf(first, [...META, ['split.no', u16(0)], ['split.count', u16(2)], ['split.tensors.count', i32(TENSORS.length)]], TENSORS.slice(0, Math.ceil((TENSORS.length - 1) / 2)));
    assert.throws(
      () => readModelFiles(first),
      (e: unknown) => isRelayError(e, 'GGUF_BAD_SPLIT') && /declares 8 tensors but the parts hold 7/.test(e.message),
    );
  });

  it('the registry: one model named after the prefix, every part hashed, sizes summed, a changed or missing part shown', async () => {
    const dir = tmp();
    const paths = writeSplitGguf(dir, 'Big-Q4', META, TENSORS, 3);
    const reg = new ModelRegistry(await Store.open(tmp()), pino({ level: 'silent' }));
    const { model } = await reg.add({ path: paths[0]! });
    assert.equal(model.name, 'Big-Q4');
    assert.deepEqual(
      model.parts!.map((p) => [p.path, p.sha256]),
      paths.map((p) => [p, sha(p)]),
    );
    assert.equal(model.sha256, splitId(paths.map(sha)));
    assert.equal(
      model.size,
      paths.reduce((s, p) => s + readFileSync(p).length, 0),
    );
    assert.deepEqual(
      modelFiles(model).map((f) => f.path),
      paths,
    );
    assert.equal(reg.fileState(model), 'ok');
    // Adding it again re-hashes nothing and changes nothing.
    assert.equal((await reg.add({ path: paths[0]! })).created, false);
    const later = new Date(Date.now() + 5000);
    utimesSync(paths[1]!, later, later);
    assert.equal(reg.fileState(model), 'changed', 'a new modification time: re-hashed before it is served');
    const same = await reg.verify('Big-Q4');
    assert.deepEqual([same.changed, same.model.sha256], [false, model.sha256]);
    assert.equal(reg.fileState(same.model), 'ok');
    writeFileSync(paths[1]!, Buffer.concat([readFileSync(paths[1]!), Buffer.alloc(32)]));
    const v = await reg.verify('Big-Q4');
    assert.equal(v.changed, true);
    assert.notEqual(v.model.sha256, splitId(paths.map((p, i) => (i === 1 ? '0'.repeat(64) : sha(p)))));
    assert.equal(v.model.parts![1]!.sha256, sha(paths[1]!));
    rmSync(paths[2]!);
    assert.equal(reg.fileState(model), 'missing');
    await assert.rejects(reg.verify('Big-Q4'), (e: unknown) => isRelayError(e, 'MODEL_FILE_MISSING'));
  });

  it('a split model registered as one file (before relay read splits) is read again as every part', async () => {
    const dir = tmp();
    const paths = writeSplitGguf(dir, 'Old', META, TENSORS, 2);
    const store = await Store.open(tmp());
    const reg = new ModelRegistry(store, pino({ level: 'silent' }));
    const st = statSync(paths[0]!);
    await store.update((data) => {
      data.models.push({
        name: 'Old',
        path: paths[0]!,
        sha256: sha(paths[0]!),
        size: st.size,
        mtimeMs: st.mtimeMs,
        required_vram_mb: null,
        arch: 'llama',
        block_count: 3,
        kv_bytes_per_token: null,
        expert_count: 0,
        expert_used_count: 0,
        context_length: null,
        embedding: false,
        added_at: new Date().toISOString(),
      });
    });
    assert.equal(reg.fileState(reg.require('Old')), 'changed');
    const v = await reg.verify('Old');
    assert.equal(v.changed, true);
    assert.deepEqual(
      v.model.parts!.map((p) => p.path),
      paths,
    );
    assert.equal(reg.fileState(v.model), 'ok');
  });

  it("a stage's fill keeps its model's other parts and any file being filled: the budget evicts something else", async () => {
    const c = new ModelCache(tmp(), 0);
    const [a, b, other, busy] = ['a', 'b', 'c', 'e'].map((x) => x.repeat(64)) as [string, string, string, string];
    // Part a holds one tensor over ggml-rpc-server's 10 MiB threshold: the fill writes 12 MiB of cache for it.
    writeGguf(c.pathOf(a), META, [{ name: 'blk.0.ffn_up.weight', dims: [3 * 1024 * 1024], type: GGML_TYPE_F32, fill: (out) => out.fill(7) }]);
    const MiB = 1024 * 1024;
    for (const [sha, age] of [
      [busy, 300_000], // the oldest: being filled for another stage right now
      [b, 200_000], // part b of a's model
      [other, 100_000], // an unrelated model: the one to go
    ] as const) {
      writeFileSync(c.pathOf(sha), Buffer.alloc(MiB));
      const t = new Date(Date.now() - age);
      utimesSync(c.pathOf(sha), t, t);
    }
    c.filling.add(busy);
    c.budget = c.usedBytes() + 12 * MiB - MiB; // room for the fill once one 1 MiB file goes
    const idx = await c.fillRpcCache(a, null, [b]);
    assert.equal(idx.files.length, 1);
    assert.deepEqual(
      [a, b, other, busy].map((x) => c.has(x)),
      [true, true, false, true],
      'only the unrelated model was evicted',
    );
  });

  it('a push keeps the other parts of its split model: the budget refuses rather than evict a sibling', () => {
    const c = new ModelCache(tmp(), 300);
    const [a, b, other] = ['a', 'b', 'd'].map((x) => x.repeat(64)) as [string, string, string];
    writeFileSync(c.pathOf(other), Buffer.alloc(100));
    writeFileSync(c.pathOf(a), Buffer.alloc(100)); // part 1, newer than `other`
    const old = new Date(Date.now() - 60_000);
    utimesSync(c.pathOf(other), old, old);
    assert.equal(c.makeRoom(150, [b, a]), true, 'room made by evicting the unrelated file');
    assert.deepEqual(
      c.inventory().map((f) => f.sha256),
      [a],
    );
    assert.equal(c.makeRoom(250, [b, a]), false, 'part 1 is never evicted for part 2');
    assert.ok(c.has(a));
  });

  it("import: a folder's split model is found by its first part, the other parts noted", async () => {
    const dir = tmp();
    writeSplitGguf(dir, 'Huge', META, TENSORS, 3);
    const d = await discoverFolder(dir);
    assert.deepEqual(
      d.found.map((f) => [f.name, basename(f.path)]),
      [['Huge', 'Huge-00001-of-00003.gguf']],
    );
    assert.deepEqual(
      d.skipped.map((s) => s.why).sort(),
      [2, 3].map((i) => `part ${i} of 3 of the split model Huge: comes with its first part`),
    );
  });

  it("the node cache: a split view links llama.cpp's names to the parts; evicting a part removes the view", () => {
    const c = new ModelCache(tmp(), 0);
    const shas = ['a', 'b'].map((x) => x.repeat(64));
    for (const s of shas) writeFileSync(c.pathOf(s), s);
    const id = 'c'.repeat(64);
    const first = c.splitView(id, shas);
    assert.equal(basename(first), 'model-00001-of-00002.gguf');
    const ino = lstatSync(first).ino;
    assert.equal(c.splitView(id, shas), first);
    assert.equal(lstatSync(first).ino, ino, 'a second replica of the model leaves the links the first one loads from');
    assert.equal(readlinkSync(first), c.pathOf(shas[0]!));
    assert.equal(readlinkSync(first.replace('00001-of', '00002-of')), c.pathOf(shas[1]!));
    assert.equal(c.evict(shas[1]!), true);
    assert.equal(existsSync(first), false);
    assert.throws(
      () => c.splitView(id, shas),
      (e: unknown) => isRelayError(e, 'MODEL_FILE_MISSING') && /part 2 of 2/.test(e.message),
    );
    assert.throws(
      () => c.splitView('../x', shas),
      (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT'),
    );
  });
});
