import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { fixture } from '../helpers/llama.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { sha256File } from '../fixtures/models.js';
import { ensureProjector } from '../fixtures/vision.js';

const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;

let hub: HubProcess;
before(async () => {
  hub = await startHub({ env: { RELAY_LOG_LEVEL: 'debug', RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1' }, args: ['--cpu-budget-mb', '1000'] });
});
after(async () => {
  await hub?.stop();
});

const cli = (...args: string[]) => run(process.execPath, [relay, ...args, '--hub', hub.url]);

describe('relay models (CLI → admin API)', { timeout: 120_000 }, () => {
  it("add hashes the file (sha256 equals the file's), reads the header, and is idempotent", async () => {
    const { stdout } = await cli('models', 'add', fixture('dense'), '--name', 'd1', '--required-vram-mb', '300');
    const sha = sha256File(fixture('dense'));
    assert.match(stdout, new RegExp(`added: d1\\s+sha256 ${sha}`));
    const again = await cli('models', 'add', fixture('dense'), '--name', 'd1');
    assert.match(again.stdout, /already registered: d1/);
    const list = await hub.api<{ models: Record<string, unknown>[] }>('/api/models');
    const m = list.body.models.find((x) => x.name === 'd1')!;
    assert.equal(m.sha256, sha);
    assert.equal(m.required_vram_mb, 300);
    assert.deepEqual([m.arch, m.block_count, m.kv_bytes_per_token, m.expert_count, m.expert_used_count, m.context_length], ['llama', 4, 1024, 0, 0, 2048]);
  });

  it('--mmproj gives a model its projector (add and set), none takes it away; a model file is no projector', async () => {
    const { stdout } = await cli('models', 'add', fixture('dense'), '--name', 'v1', '--mmproj', ensureProjector());
    assert.match(stdout, new RegExp(`added: v1 \\(sees images: ${ensureProjector().replace(/[.]/g, '\\.')}\\)`));
    const proj = async () => (await hub.api<{ models: { name: string; mmproj?: { sha256: string } }[] }>('/api/models')).body.models.find((x) => x.name === 'v1')!.mmproj;
    assert.equal((await proj())?.sha256, sha256File(ensureProjector()));
    await cli('models', 'set', 'v1', '--mmproj', 'none');
    assert.equal(await proj(), undefined);
    await cli('models', 'set', 'v1', '--mmproj', ensureProjector());
    assert.equal((await proj())?.sha256, sha256File(ensureProjector()));
    await assert.rejects(cli('models', 'set', 'v1', '--mmproj', fixture('moe')), (e: { stderr: string }) => /is not a vision projector/.test(e.stderr));
    await cli('models', 'rm', 'v1');
  });

  it('ls shows size, need and availability; rm removes', async () => {
    await cli('models', 'add', fixture('moe'), '--name', 'm1');
    const ls = await cli('models', 'ls');
    assert.match(ls.stdout, /d1\s+llama\s+34\.2 MB\s+needs \d+ MB\s+available/);
    // Under it, the parts of the need and the one that dominates.
    assert.match(ls.stdout, /\n {2}weights \d+ \+ KV \d+ \+ overhead \d+ MB; largest: the weights\n/);
    assert.match(ls.stdout, /m1\s+qwen3moe/);
    const rm = await cli('models', 'rm', 'm1');
    assert.match(rm.stdout, /removed: m1/);
    assert.doesNotMatch((await cli('models', 'ls')).stdout, /m1/);
  });

  it('errors are clear and coded: unknown model, non-GGUF file, unreachable hub', async () => {
    await assert.rejects(cli('models', 'rm', 'ghost'), (e: { stderr: string; code: number }) => e.code === 1 && /model_not_found/.test(e.stderr));
    await assert.rejects(cli('models', 'add', relay), (e: { stderr: string }) => /gguf_bad_magic/.test(e.stderr));
    await assert.rejects(run(process.execPath, [relay, 'models', 'ls', '--hub', 'http://127.0.0.1:9']), (e: { stderr: string }) => /cannot reach the hub at http:\/\/127\.0\.0\.1:9/.test(e.stderr));
  });

  it("the admin API streams hashing progress as NDJSON for the CLI's progress bar", async () => {
    const res = await fetch(`${hub.url}/api/models?progress=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: fixture('large'), name: 'big' }),
    });
    const lines = (await res.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { progress?: { done: number; total: number }; model?: { name: string } });
    const progress = lines.filter((l) => l.progress);
    assert.ok(progress.length >= 2, `progress lines: ${progress.length}`);
    assert.equal(progress[progress.length - 1]!.progress!.done, progress[progress.length - 1]!.progress!.total);
    assert.equal(lines[lines.length - 1]!.model!.name, 'big');
  });

  it('every fit-check is logged at debug level with its breakdown', async () => {
    await hub.api('/v1/models');
    const line = hub.logs.find((l) => l.includes('"msg":"fit-check"'));
    assert.ok(line, 'a fit-check debug line');
    const fit = (JSON.parse(line) as { fit: Record<string, number> }).fit;
    for (const k of ['weightsMb', 'kvMb', 'overheadMb', 'needMb', 'ctx', 'slots', 'kvScale']) assert.equal(typeof fit[k], 'number', k);
    assert.ok(Math.abs(fit.needMb! - (fit.weightsMb! + fit.kvMb! + fit.overheadMb!)) < 1e-9);
  });
});
