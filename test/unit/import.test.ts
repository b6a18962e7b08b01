import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { bestProjector, discoverFolder, discoverOllama, importName, ollamaRoot, quantBits } from '../../src/main/core/models/import.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'relay-import-'));
const hex = (c: string) => c.repeat(64);

function manifest(root: string, path: string[], layers: { mediaType: string; digest: string }[]): void {
  const dir = join(root, 'manifests', ...path.slice(0, -1));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, path[path.length - 1]!), JSON.stringify({ schemaVersion: 2, layers }));
}
function blob(root: string, h: string): string {
  mkdirSync(join(root, 'blobs'), { recursive: true });
  const p = join(root, 'blobs', `sha256-${h}`);
  writeFileSync(p, 'GGUF…');
  return p;
}

describe('import: finding the GGUFs already on the machine', () => {
  it("Ollama: each manifest's model layer, named model:tag, its sha256 from the digest, its projector layer paired; adapters and missing blobs are notes", async () => {
    const root = tmp();
    const model = blob(root, hex('a'));
    const projector = blob(root, hex('b'));
    manifest(
      root,
      ['registry.ollama.ai', 'library', 'qwen3', '8b'],
      [
        { mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${hex('a')}` },
        { mediaType: 'application/vnd.ollama.image.projector', digest: `sha256:${hex('b')}` },
        { mediaType: 'application/vnd.ollama.image.template', digest: `sha256:${hex('c')}` },
      ],
    );
    manifest(root, ['hf.co', 'bartowski', 'Some-Model-GGUF', 'Q4_K_M'], [{ mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${hex('a')}` }]);
    manifest(root, ['registry.ollama.ai', 'library', 'gone', 'latest'], [{ mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${hex('d')}` }]);
    manifest(root, ['registry.ollama.ai', 'library', 'lora', 'x'], [{ mediaType: 'application/vnd.ollama.image.adapter', digest: `sha256:${hex('e')}` }]);
    const d = await discoverOllama(root);
    assert.deepEqual(d.found.map((f) => [f.name, f.path, f.sha256, f.mmproj?.path, f.mmproj?.sha256]).sort(), [
      ['bartowski-Some-Model-GGUF:Q4_K_M', model, hex('a'), undefined, undefined],
      ['qwen3:8b', model, hex('a'), projector, hex('b')],
    ]);
    const why = d.skipped.map((s) => s.why).sort();
    assert.equal(why.length, 2);
    assert.match(why.join('\n'), /gone:latest: the model blob is missing/);
    assert.match(why.join('\n'), /lora:x: a LoRA adapter/);
  });

  it("a folder (LM Studio's): every .gguf below it, named after its file, with the projector beside it; later split parts are notes", async () => {
    const root = tmp();
    const dir = join(root, 'lmstudio-community', 'Qwen3-8B-GGUF');
    mkdirSync(dir, { recursive: true });
    for (const f of ['Qwen3-8B-Q4_K_M.gguf', 'mmproj-Qwen3-8B-f16.gguf', 'Big-00002-of-00003.gguf', 'README.md']) writeFileSync(join(dir, f), 'GGUF…');
    writeFileSync(join(dir, 'empty.gguf'), '');
    const d = await discoverFolder(root, 'lmstudio');
    assert.deepEqual(
      d.found.map((f) => [f.name, f.sha256, f.mmproj?.path]),
      [['Qwen3-8B-Q4_K_M', undefined, join(dir, 'mmproj-Qwen3-8B-f16.gguf')]],
    );
    assert.deepEqual(d.skipped.map((s) => s.why).sort(), ['an empty file', 'part 2 of 3 of the split model Big: comes with its first part']);
  });

  it("a projector's quantization as llama.cpp reads it from the name; the closest to the model's wins", () => {
    assert.equal(quantBits('Qwen3-8B-Q4_K_M.gguf'), 4);
    assert.equal(quantBits('mmproj-model-f16.gguf'), 16);
    assert.equal(quantBits('mmproj-BF16.gguf'), 16);
    assert.equal(quantBits('Big-Q8_0-00001-of-00003.gguf'), 8);
    assert.equal(quantBits('model.gguf'), 0);
    const ps = ['/m/mmproj-x-f32.gguf', '/m/mmproj-x-f16.gguf', '/m/mmproj-x-Q8_0.gguf'];
    assert.equal(bestProjector('/m/x-Q4_K_M.gguf', ps)?.path, '/m/mmproj-x-Q8_0.gguf');
    assert.equal(bestProjector('/m/x-BF16.gguf', ps)?.path, '/m/mmproj-x-f16.gguf');
    assert.equal(bestProjector('/m/x-F32.gguf', ps)?.path, '/m/mmproj-x-f32.gguf');
    assert.match(bestProjector('/m/x.gguf', ps)!.why, /of 3 projectors/);
    assert.equal(bestProjector('/m/x.gguf', []), null);
  });

  it('names fit the registry (letters, digits, . _ : -) and OLLAMA_MODELS wins as Ollama reads it', () => {
    assert.equal(importName('hf.co/some one/Model:Q4'), 'hf.co-some-one-Model:Q4');
    assert.equal(importName('--x'), 'x');
    assert.equal(importName('///'), 'model');
    assert.equal(ollamaRoot({ OLLAMA_MODELS: '/srv/ollama' }), '/srv/ollama');
  });
  it('walks a folder without holding the event loop: other work runs while it reads', async () => {
    const root = tmp();
    for (let i = 0; i < 20; i++) {
      const dir = join(root, `org${i}`, 'repo');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `m${i}.gguf`), 'GGUF…');
    }
    // A stand-in for the hub's streams: a callback on every turn of the event loop until the walk is done.
    let turns = 0;
    let done = false;
    const spin = (): void => {
      turns++;
      if (!done) setImmediate(spin);
    };
    setImmediate(spin);
    const d = await discoverFolder(root);
    done = true;
    assert.ok(turns > 1, `the event loop turned ${turns} times during the walk`);
    assert.equal(d.found.length, 20);
  });
});
