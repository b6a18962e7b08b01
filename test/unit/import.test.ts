import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { discoverFolder, discoverOllama, importName, ollamaRoot } from '../../src/main/core/models/import.js';

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
  it("Ollama: each manifest's model layer, named model:tag, its sha256 from the digest; projectors, adapters and missing blobs are notes", async () => {
    const root = tmp();
    const model = blob(root, hex('a'));
    blob(root, hex('b'));
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
    assert.deepEqual(d.found.map((f) => [f.name, f.path, f.sha256]).sort(), [
      ['bartowski-Some-Model-GGUF:Q4_K_M', model, hex('a')],
      ['qwen3:8b', model, hex('a')],
    ]);
    const why = d.skipped.map((s) => s.why).sort();
    assert.equal(why.length, 3);
    assert.match(why.join('\n'), /gone:latest: the model blob is missing/);
    assert.match(why.join('\n'), /lora:x: a LoRA adapter/);
    assert.match(why.join('\n'), /qwen3:8b: a vision projector/);
  });

  it("a folder (LM Studio's): every .gguf below it, named after its file; projectors and later split parts are notes", async () => {
    const root = tmp();
    const dir = join(root, 'lmstudio-community', 'Qwen3-8B-GGUF');
    mkdirSync(dir, { recursive: true });
    for (const f of ['Qwen3-8B-Q4_K_M.gguf', 'mmproj-Qwen3-8B-f16.gguf', 'Big-00002-of-00003.gguf', 'README.md']) writeFileSync(join(dir, f), 'GGUF…');
    writeFileSync(join(dir, 'empty.gguf'), '');
    const d = await discoverFolder(root, 'lmstudio');
    assert.deepEqual(
      d.found.map((f) => [f.name, f.sha256]),
      [['Qwen3-8B-Q4_K_M', undefined]],
    );
    assert.deepEqual(d.skipped.map((s) => s.why).sort(), [
      'a vision projector (mmproj: not a model llama-server loads on its own)',
      'an empty file',
      'part 2 of 3 of the split model Big: comes with its first part',
    ]);
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
