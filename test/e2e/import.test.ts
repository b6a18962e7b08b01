import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { ensureSplitFixture, sha256File } from '../fixtures/models.js';
import { ensureProjector } from '../fixtures/vision.js';
import { startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';

/**
 * `relay models import` with a real hub: an Ollama store (manifests + blobs named by sha256, made from the
 * test fixtures) and an LM Studio folder register under readable names and serve /v1; a vision model's projector
 * is paired with it (Ollama's projector layer; in a folder, the mmproj whose quantization is closest), one that
 * is not a projector leaves its model text-only with a note; a split part and a missing blob are notes; a
 * registered file that disappears is shown as gone and never served.
 */
const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

describe('relay models import', { timeout: 180_000 }, () => {
  it('Ollama and LM Studio layouts register under readable names and serve /v1; a vanished file is shown and refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-import-e2e-'));
    // An Ollama store: library/tiny:q4 → the dense fixture as a blob with the vision fixture's projector layer;
    // library/tiny:bad → the same model with a "projector" layer that is not one.
    const ollama = join(dir, 'ollama');
    const sha = sha256File(fixture('dense'));
    const projSha = sha256File(ensureProjector());
    mkdirSync(join(ollama, 'blobs'), { recursive: true });
    copyFileSync(fixture('dense'), join(ollama, 'blobs', `sha256-${sha}`));
    copyFileSync(ensureProjector(), join(ollama, 'blobs', `sha256-${projSha}`));
    writeFileSync(join(ollama, 'blobs', `sha256-${'b'.repeat(64)}`), 'projector bytes');
    mkdirSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'tiny'), { recursive: true });
    for (const [tag, proj] of [
      ['q4', projSha],
      ['bad', 'b'.repeat(64)],
    ] as const) {
      writeFileSync(
        join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'tiny', tag),
        JSON.stringify({
          schemaVersion: 2,
          layers: [
            { mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${sha}`, size: 1 },
            { mediaType: 'application/vnd.ollama.image.projector', digest: `sha256:${proj}`, size: 1 },
          ],
        }),
      );
    }
    // An LM Studio folder: publisher/repo/file.gguf with two projectors beside it (f16 and Q8_0), and another
    // repo with a model split in 3 parts.
    const lm = join(dir, 'lmstudio', 'models', 'lmstudio-community', 'Dense-GGUF');
    mkdirSync(lm, { recursive: true });
    copyFileSync(fixture('dense', 2), join(lm, 'Dense-Q8_0.gguf'));
    copyFileSync(ensureProjector(), join(lm, 'mmproj-Dense-f16.gguf'));
    copyFileSync(ensureProjector(), join(lm, 'mmproj-Dense-Q8_0.gguf'));
    const hugeDir = join(dir, 'lmstudio', 'models', 'lmstudio-community', 'Huge-GGUF');
    mkdirSync(hugeDir, { recursive: true });
    const split = ensureSplitFixture('dense', 3, { vocabDir: llama().vocabDir, seed: 3 });
    for (const i of [1, 2, 3]) copyFileSync(split.replace('-00001-of-', `-0000${i}-of-`), join(hugeDir, `Huge-0000${i}-of-00003.gguf`));

    const hub = await startHub({ env: { ...ENV, OLLAMA_MODELS: ollama }, args: ['--cpu-budget-mb', '1000'] });
    const cli = (...args: string[]) => run(process.execPath, [relay, 'models', ...args, '--hub', hub.url]);
    const ask = (model: string) =>
      fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }) });
    try {
      const fromOllama = (await cli('import', 'ollama')).stdout;
      assert.match(fromOllama, /imported from .*ollama: 2 new, 0 already registered/);
      assert.match(fromOllama, /added {3}tiny:q4 {2}\+ projector .*sha256-[0-9a-f]{64} \(the projector layer of its manifest\)/);
      assert.match(fromOllama, /added {3}tiny:bad\n/);
      assert.match(fromOllama, /skipped .*sha256-b{64}: tiny:bad: its projector cannot be used \(.*\): imported as text only/);
      const models = (await hub.api<{ models: { name: string; sha256: string; file: string; mmproj?: { path: string; sha256: string } }[] }>('/api/models')).body.models;
      assert.deepEqual(
        models.map((m) => [m.name, m.sha256, m.file, m.mmproj?.sha256 ?? null]).sort(),
        [
          ['tiny:bad', sha, 'ok', null],
          ['tiny:q4', sha, 'ok', projSha],
        ],
        "the digests are the files' sha256",
      );
      assert.equal((await ask('tiny:q4')).status, 200);
      assert.match((await cli('import', 'ollama')).stdout, /0 new, 2 already registered/, 'importing again changes nothing');

      const fromLm = (await cli('import', join(dir, 'lmstudio', 'models'))).stdout;
      assert.match(fromLm, /added {3}Dense-Q8_0 {2}\+ projector .*mmproj-Dense-Q8_0\.gguf \(of 2 projectors beside it, the one whose quantization is closest to the model's\)/);
      assert.match(fromLm, /skipped .*mmproj-Dense-f16\.gguf: a vision projector \(mmproj\) no model beside it was paired with/);
      assert.match(fromLm, /added {3}Huge\n/);
      const dense = (await hub.api<{ models: { name: string; mmproj?: { path: string } }[] }>('/api/models')).body.models.find((m) => m.name === 'Dense-Q8_0')!;
      assert.equal(dense.mmproj?.path, join(lm, 'mmproj-Dense-Q8_0.gguf'));
      assert.match(fromLm, /skipped .*Huge-00002-of-00003\.gguf: part 2 of 3 of the split model Huge: comes with its first part/);
      assert.equal((await ask('Dense-Q8_0')).status, 200);
      assert.equal((await ask('Huge')).status, 200, 'the split model loads in llama-server from its first part');

      // The LM Studio file goes away: listed as gone, and a request is refused with its code.
      rmSync(join(lm, 'Dense-Q8_0.gguf'));
      assert.match((await cli('ls')).stdout, /Dense-Q8_0\s+.*unavailable: the file is gone from .*Dense-Q8_0\.gguf/);
      const gone = await ask('Dense-Q8_0');
      assert.ok(gone.status >= 400, String(gone.status));
      assert.equal(((await gone.json()) as { error: { code: string } }).error.code, 'model_file_missing');
    } finally {
      await hub.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
