import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { ensureSplitFixture, sha256File } from '../fixtures/models.js';
import { startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';

/**
 * `relay models import` with a real hub: an Ollama store (manifests + blobs named by sha256, made from the
 * test fixtures) and an LM Studio folder register under readable names and serve /v1; a projector, a split
 * part and a missing blob are notes; a registered file that disappears is shown as gone and never served.
 */
const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

describe('relay models import', { timeout: 180_000 }, () => {
  it('Ollama and LM Studio layouts register under readable names and serve /v1; a vanished file is shown and refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-import-e2e-'));
    // An Ollama store: library/tiny:q4 → the dense fixture as a blob, plus a projector layer.
    const ollama = join(dir, 'ollama');
    const sha = sha256File(fixture('dense'));
    mkdirSync(join(ollama, 'blobs'), { recursive: true });
    copyFileSync(fixture('dense'), join(ollama, 'blobs', `sha256-${sha}`));
    writeFileSync(join(ollama, 'blobs', `sha256-${'b'.repeat(64)}`), 'projector bytes');
    mkdirSync(join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'tiny'), { recursive: true });
    writeFileSync(
      join(ollama, 'manifests', 'registry.ollama.ai', 'library', 'tiny', 'q4'),
      JSON.stringify({
        schemaVersion: 2,
        layers: [
          { mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${sha}`, size: 1 },
          { mediaType: 'application/vnd.ollama.image.projector', digest: `sha256:${'b'.repeat(64)}`, size: 1 },
        ],
      }),
    );
    // An LM Studio folder: publisher/repo/file.gguf, with a projector and a model split in 3 parts beside it.
    const lm = join(dir, 'lmstudio', 'models', 'lmstudio-community', 'Dense-GGUF');
    mkdirSync(lm, { recursive: true });
    copyFileSync(fixture('dense', 2), join(lm, 'Dense-Q8_0.gguf'));
    writeFileSync(join(lm, 'mmproj-Dense-f16.gguf'), 'GGUF');
    const split = ensureSplitFixture('dense', 3, { vocabDir: llama().vocabDir, seed: 3 });
    for (const i of [1, 2, 3]) copyFileSync(split.replace('-00001-of-', `-0000${i}-of-`), join(lm, `Huge-0000${i}-of-00003.gguf`));

    const hub = await startHub({ env: { ...ENV, OLLAMA_MODELS: ollama }, args: ['--cpu-budget-mb', '1000'] });
    const cli = (...args: string[]) => run(process.execPath, [relay, 'models', ...args, '--hub', hub.url]);
    const ask = (model: string) =>
      fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }) });
    try {
      const fromOllama = (await cli('import', 'ollama')).stdout;
      assert.match(fromOllama, /imported from .*ollama: 1 new, 0 already registered/);
      assert.match(fromOllama, /added {3}tiny:q4/);
      assert.match(fromOllama, /skipped .*sha256-b{64}: tiny:q4: a vision projector/);
      const models = (await hub.api<{ models: { name: string; sha256: string; file: string }[] }>('/api/models')).body.models;
      assert.deepEqual(
        models.map((m) => [m.name, m.sha256, m.file]),
        [['tiny:q4', sha, 'ok']],
        "the digest is the file's sha256",
      );
      assert.equal((await ask('tiny:q4')).status, 200);
      assert.match((await cli('import', 'ollama')).stdout, /0 new, 1 already registered/, 'importing again changes nothing');

      const fromLm = (await cli('import', join(dir, 'lmstudio', 'models'))).stdout;
      assert.match(fromLm, /added {3}Dense-Q8_0/);
      assert.match(fromLm, /skipped .*mmproj-Dense-f16\.gguf: a vision projector/);
      assert.match(fromLm, /added {3}Huge\n/);
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
