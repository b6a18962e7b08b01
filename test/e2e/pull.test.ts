import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { ensureSplitFixture, sha256File } from '../fixtures/models.js';
import { ensureProjector } from '../fixtures/vision.js';
import { startFakeHub, type FakeHub } from '../helpers/hf-hub.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { mountSmallDisk } from '../helpers/small-disk.js';
import { directTexts, fixture, llama } from '../helpers/llama.js';
import { until } from '../helpers/proc.js';

import type { PullView } from '../../src/shared/status.js';

/**
 * `relay models pull` against a stand-in for the Hugging Face Hub's HTTP interface (helpers/hf-hub.ts; no machine
 * here reaches the real Hub): the real download code, resolving, choosing by quantization, redirects to another
 * origin, Range resumes after a dropped connection and after a hub restart, the sha256 check, a gated repository,
 * the disk check; the pulled model then answers /v1 as a bare llama-server does on the same file.
 */
const run = promisify(execFile);
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const TOKEN = 'hf_testtoken_0123456789';

async function pull(hub: HubProcess, model: string, name?: string): Promise<{ status: number; pull?: PullView; error?: { code: string; message: string; details?: Record<string, unknown> } }> {
  const r = await hub.api<{ pull?: PullView; error?: { code: string; message: string; details?: Record<string, unknown> } }>('/api/models/pull', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, name }),
  });
  return { status: r.status, ...r.body };
}

const settled = (hub: HubProcess, id: string): Promise<PullView> =>
  until(
    async () => (await hub.api<{ pull: PullView }>(`/api/pulls/${id}`)).body.pull,
    (p) => !['downloading', 'registering'].includes(p.state),
    120_000,
  );

async function registered(
  hub: HubProcess,
  name: string,
): Promise<{ name: string; path: string; sha256: string; parts?: { path: string; sha256: string }[]; mmproj?: { path: string; sha256: string } } | undefined> {
  const r = await hub.api<{ models: { name: string; path: string; sha256: string }[] }>('/api/models');
  return r.body.models.find((m) => m.name === name);
}

describe('models from Hugging Face (relay models pull)', { timeout: 600_000 }, () => {
  let hf: FakeHub;
  let hub: HubProcess;
  const q4 = fixture('dense', 1);
  const q8 = fixture('dense', 2);
  const split = ensureSplitFixture('dense', 3, { vocabDir: llama().vocabDir, seed: 4 });
  const parts = [1, 2, 3].map((i) => split.replace('-00001-of-', `-0000${i}-of-`));
  before(async () => {
    hf = await startFakeHub({
      'acme/tiny-GGUF': {
        files: [
          { path: 'tiny-Q4_K_M.gguf', source: q4 },
          { path: 'tiny-Q8_0.gguf', source: q8 },
          { path: 'mmproj-tiny-f16.gguf', source: ensureProjector() },
        ],
      },
      'acme/split-GGUF': { files: parts.map((p, i) => ({ path: `Q8_0/big-Q8_0-0000${i + 1}-of-00003.gguf`, source: p })) },
      'acme/drop-GGUF': { files: [{ path: 'drop-Q4_K_M.gguf', source: q4 }] },
      'acme/restart-GGUF': { files: [{ path: 'restart-Q8_0.gguf', source: q8 }] },
      'acme/cancel-GGUF': { files: [{ path: 'cancel-Q4_K_M.gguf', source: q4 }] },
      'acme/web-GGUF': { files: [{ path: 'web-Q8_0.gguf', source: q8 }] },
      'acme/gated-GGUF': { files: [{ path: 'gated-Q4_K_M.gguf', source: q4 }], token: TOKEN },
      'acme/bad-GGUF': { files: [{ path: 'bad-Q4_K_M.gguf', source: q4, listedSha256: 'ab'.repeat(32) }] },
      'acme/huge-GGUF': { files: [{ path: 'huge-Q4_K_M.gguf', source: q8 }] },
      'acme/notes': { files: [] },
      'acme/vision-GGUF': {
        files: [
          { path: 'vision-Q4_K_M.gguf', source: q4 },
          { path: 'vision-Q8_0.gguf', source: q8 },
          { path: 'mmproj-vision-f16.gguf', source: ensureProjector() },
        ],
      },
      'acme/eyes-GGUF': {
        files: [
          { path: 'eyes-Q4_K_M.gguf', source: q4 },
          { path: 'eyes-Q8_0.gguf', source: q8 },
          { path: 'mmproj-eyes-f16.gguf', source: ensureProjector() },
        ],
      },
      'acme/cdn-GGUF': { files: [{ path: 'cdn-Q4_K_M.gguf', source: q4 }] },
      'acme/stuck-GGUF': { files: [{ path: 'stuck-Q4_K_M.gguf', source: q4 }] },
      'acme/room1-GGUF': { files: [{ path: 'room1-Q4_K_M.gguf', source: q4 }] },
      'acme/room2-GGUF': { files: [{ path: 'room2-Q4_K_M.gguf', source: q8 }] },
    });
    hub = await startHub({ env: { ...ENV, HF_ENDPOINT: hf.endpoint }, args: ['--cpu-budget-mb', '1000'] });
  });
  after(async () => {
    await hub?.stop();
    await hf?.close();
  });

  it('by repo and quantization: the Q8_0 file, verified and registered; the default is Q4_K_M with its projector; it answers /v1 like the file', async () => {
    const a = await pull(hub, 'acme/tiny-GGUF:Q8_0');
    assert.equal(a.status, 202, JSON.stringify(a));
    assert.equal(a.pull!.name, 'tiny:q8_0');
    const done = await settled(hub, a.pull!.id);
    assert.equal(done.state, 'done', JSON.stringify(done));
    const m = (await registered(hub, 'tiny:q8_0'))!;
    assert.equal(m.sha256, sha256File(q8), 'the Q8_0 file, hashing to what the repository lists');
    assert.ok(m.path.startsWith(join(hub.home, 'models', 'acme', 'tiny-GGUF')), m.path);
    assert.equal(hf.sentFor('tiny-Q8_0.gguf'), statSync(q8).size, 'every byte once');
    assert.ok(
      hf.requests.filter((r) => r.origin === 'api').some((r) => r.path.includes('/resolve/')),
      'through the resolve URL, redirected to the file server',
    );

    const b = await pull(hub, 'hf.co/acme/tiny-GGUF', 'tiny');
    const bd = await settled(hub, b.pull!.id);
    assert.equal(bd.state, 'done', JSON.stringify(bd));
    assert.deepEqual(
      bd.files.map((f) => f.path),
      ['tiny-Q4_K_M.gguf', 'mmproj-tiny-f16.gguf'],
    );
    const t = (await registered(hub, 'tiny'))!;
    assert.equal(t.sha256, sha256File(q4));
    assert.equal(t.mmproj?.sha256, sha256File(ensureProjector()), 'the vision projector beside it, registered with it');

    const prompt = 'The garden in spring';
    const [want] = await directTexts(q8, [prompt], 12);
    const r = await fetch(`${hub.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny:q8_0', prompt, max_tokens: 12, temperature: 0, top_k: 1, seed: 42 }),
    });
    const j = (await r.json()) as { choices: { text: string }[] };
    assert.equal(r.status, 200, JSON.stringify(j));
    assert.equal(j.choices[0]!.text, want, 'the pulled model says what llama-server says on the same file');
  });

  it('a split model: every part, in order, each hashed as it came', async () => {
    const a = await pull(hub, 'acme/split-GGUF:Q8_0', 'big');
    assert.equal(a.status, 202, JSON.stringify(a));
    assert.equal((await settled(hub, a.pull!.id)).state, 'done');
    const m = (await registered(hub, 'big'))!;
    assert.deepEqual(
      m.parts!.map((p) => p.sha256),
      parts.map((p) => sha256File(p)),
    );
  });

  it('a dropped connection mid-file resumes from the byte it stopped at: what reached the disk is not fetched again', async () => {
    const size = statSync(q4).size;
    const dropAt = Math.floor(size * 0.4);
    hf.dropOnce('drop-Q4_K_M.gguf', dropAt);
    const a = await pull(hub, 'acme/drop-GGUF', 'dropped');
    const done = await settled(hub, a.pull!.id);
    assert.equal(done.state, 'done', JSON.stringify(done));
    const requests = hf.requests.filter((r) => r.origin === 'files' && r.path.endsWith('/drop-Q4_K_M.gguf'));
    assert.equal(requests.length, 2, 'one request, and one resume');
    const from = Number(/^bytes=(\d+)-$/.exec(requests[1]!.range ?? '')?.[1]);
    // The resume starts at the part file's end: at most what was still in flight when the connection dropped
    // (in the client's socket buffers, never handed to relay) is sent twice.
    assert.ok(from > 0 && from <= dropAt && dropAt - from <= 256 * 1024, `resumed from ${from}, dropped at ${dropAt}`);
    assert.equal(requests[1]!.sent, size - from, 'the rest, once');
    assert.equal((await registered(hub, 'dropped'))!.sha256, sha256File(q4));
  });

  it('a hub restarted mid-download goes on where its part file stops', async () => {
    const size = statSync(q8).size;
    const held = hf.holdOnce('restart-Q8_0.gguf', Math.floor(size / 2));
    const a = await pull(hub, 'acme/restart-GGUF', 'restarted');
    assert.equal(a.status, 202, JSON.stringify(a));
    await held.reached;
    await until(
      async () => (await hub.api<{ pull: PullView }>(`/api/pulls/${a.pull!.id}`)).body.pull.done_bytes,
      (n) => n >= Math.floor(size / 2),
    );
    const home = hub.home;
    await hub.stop();
    held.release();
    hub = await startHub({ env: { ...ENV, HF_ENDPOINT: hf.endpoint }, args: ['--cpu-budget-mb', '1000'], home });
    const m = await until(
      () => registered(hub, 'restarted'),
      (x) => x !== undefined,
      120_000,
    );
    assert.equal(m!.sha256, sha256File(q8));
    const ranged = hf.requests.filter((r) => r.origin === 'files' && r.path.endsWith('/restart-Q8_0.gguf')).at(-1)!;
    assert.equal(ranged.range, `bytes=${Math.floor(size / 2)}-`, 'the restarted hub asked only for the rest');
    assert.deepEqual(readdirSync(join(home, 'models', '.pulls')), [], 'the finished job is gone from disk');
  });

  it('a file that does not hash to the listed sha256 is deleted and nothing is registered', async () => {
    const a = await pull(hub, 'acme/bad-GGUF');
    const done = await settled(hub, a.pull!.id);
    assert.equal(done.state, 'failed');
    assert.equal(done.error?.code, 'hash_mismatch');
    assert.equal(await registered(hub, 'bad:q4_k_m'), undefined);
    const folder = join(hub.home, 'models', 'acme', 'bad-GGUF', hf.commit.slice(0, 12));
    assert.deepEqual(readdirSync(folder), [], 'no part file is left');
  });

  it('a gated repository: refused without a token, pulled with HF_TOKEN, which only the Hub sees', async () => {
    const no = await pull(hub, 'acme/gated-GGUF');
    assert.equal(no.status, 403);
    assert.equal(no.error?.code, 'hf_gated');
    assert.match(no.error?.message ?? '', /HF_TOKEN/);

    const home = hub.home;
    await hub.stop();
    hub = await startHub({ env: { ...ENV, HF_ENDPOINT: hf.endpoint, HF_TOKEN: TOKEN }, args: ['--cpu-budget-mb', '1000'], home });
    const yes = await pull(hub, 'acme/gated-GGUF');
    assert.equal(yes.status, 202, JSON.stringify(yes));
    assert.equal((await settled(hub, yes.pull!.id)).state, 'done');
    const gated = hf.requests.filter((r) => r.path.includes('gated'));
    assert.ok(gated.filter((r) => r.origin === 'api').every((r) => r.authorization === null || r.authorization === `Bearer ${TOKEN}`));
    assert.ok(
      gated.some((r) => r.authorization === `Bearer ${TOKEN}`),
      'the token went to the Hub',
    );
    assert.ok(
      gated.filter((r) => r.origin === 'files').every((r) => r.authorization === null),
      'never to the file server it redirects to',
    );
    assert.ok(!hub.logs.join('\n').includes(TOKEN), 'the token is not in the log');
    assert.ok(!readFileSync(`/proc/${hub.proc.pid}/cmdline`, 'utf8').includes(TOKEN), 'nor in argv');
  });

  it('clear errors: no such repository, no GGUF, no such quantization (listing what there is), not a repository', async () => {
    const none = await pull(hub, 'acme/nothing-here');
    assert.equal(none.status, 404);
    assert.equal(none.error?.code, 'hf_repo_not_found');
    const notes = await pull(hub, 'acme/notes');
    assert.equal(notes.error?.code, 'hf_no_gguf');
    const q = await pull(hub, 'acme/tiny-GGUF:Q5_K_M');
    assert.equal(q.status, 404);
    assert.equal(q.error?.code, 'hf_quant_not_found');
    assert.deepEqual(q.error?.details?.available, ['Q4_K_M', 'Q8_0']);
    const bad = await pull(hub, 'not a repo');
    assert.equal(bad.error?.code, 'invalid_request');
  });

  it('a pull that cannot fit on the disk is refused before a byte is fetched', async () => {
    // The disk's real free space, read by the hub, against a download folder on a small filesystem of its own.
    const small = join(hub.home, 'small-disk');
    const unmount = mountSmallDisk(small, 16);
    const tight = await startHub({ env: { ...ENV, HF_ENDPOINT: hf.endpoint, RELAY_DOWNLOAD_DIR: small }, args: ['--cpu-budget-mb', '1000'] });
    try {
      const r = await pull(tight, 'acme/huge-GGUF');
      assert.equal(r.status, 507, JSON.stringify(r));
      assert.equal(r.error?.code, 'disk_full');
      assert.match(r.error?.message ?? '', /nothing was downloaded/);
      assert.equal(hf.sentFor('huge-Q4_K_M.gguf'), 0, 'not a byte fetched');
      assert.ok(!existsSync(join(small, 'acme', 'huge-GGUF', hf.commit.slice(0, 12), 'huge-Q4_K_M.gguf.part')));
    } finally {
      await tight.stop();
      unmount();
    }
  });

  it('the CLI: `relay models pull` draws its progress, registers the model, and says what went wrong with its code', async () => {
    const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
    const ok = await run(process.execPath, [relay, 'models', 'pull', 'acme/split-GGUF', '--name', 'via-cli', '--hub', hub.url]);
    assert.match(ok.stdout, /pulling acme\/split-GGUF @ [0-9a-f]{12} as "via-cli"/);
    assert.match(ok.stdout, /registered: via-cli/);
    assert.match(ok.stderr, /via-cli \[#+\] 100% {2}[\d.]+ MB\/s {2}done in \d+:\d\d/, 'the progress line with its rate (off a terminal: one line per 10 % and the last)');
    assert.ok(await registered(hub, 'via-cli'));
    const bad = await run(process.execPath, [relay, 'models', 'pull', 'acme/tiny-GGUF:Q5_K_M', '--hub', hub.url]).then(
      () => null,
      (e: { code: number; stderr: string }) => e,
    );
    assert.equal(bad?.code, 1);
    assert.match(bad?.stderr ?? '', /hf_quant_not_found: .*Q4_K_M, Q8_0/);
  });

  it("the dashboard's Download field: a live progress bar, then the model in the list", async () => {
    const size = statSync(q8).size;
    const held = hf.holdOnce('web-Q8_0.gguf', Math.floor(size / 2));
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] });
    try {
      const page = await browser.newPage();
      await page.goto(hub.url);
      await page.fill('#pull-model', 'acme/web-GGUF');
      await page.click('#pull-form button[type=submit]');
      const bar = page.locator('progress[aria-label="download of web:q8_0"]');
      await bar.waitFor({ timeout: 20_000 });
      await until(
        async () => Number(await bar.getAttribute('value')),
        (v) => v >= Math.floor(size / 2),
      );
      assert.equal(Number(await bar.getAttribute('max')), size);
      held.release();
      await page.locator('#pulls tr', { hasText: 'web:q8_0' }).locator('.ok', { hasText: 'done' }).waitFor({ timeout: 60_000 });
      await page.locator('#models tr', { hasText: 'web:q8_0' }).waitFor({ timeout: 20_000 });
    } finally {
      held.release();
      await browser.close();
    }
  });

  /**
   * `acme/REPO-GGUF:Q4_K_M` pulled with its projector held a third of the way, then `:Q8_0`, which reaches the same
   * projector file once its own model file is in: both pulls now wait on that one download.
   */
  async function bothWaitingOnProjector(repo: string) {
    const held = hf.holdOnce(`mmproj-${repo}-f16.gguf`, Math.floor(statSync(ensureProjector()).size / 3));
    const a = await pull(hub, `acme/${repo}-GGUF:Q4_K_M`, `${repo}-a`);
    await held.reached;
    const b = await pull(hub, `acme/${repo}-GGUF:Q8_0`, `${repo}-b`);
    await until(
      async () => (await hub.api<{ pull: PullView }>(`/api/pulls/${b.pull!.id}`)).body.pull.done_bytes,
      (n) => n >= statSync(q8).size,
    );
    return { a, b, held };
  }

  it('two quantizations of one vision repo pulled at once share its projector: written once, registered for both as listed', async () => {
    const projector = ensureProjector();
    const size = statSync(projector).size;
    const { a, b, held } = await bothWaitingOnProjector('vision');
    held.release();
    const [da, db] = [await settled(hub, a.pull!.id), await settled(hub, b.pull!.id)];
    assert.deepEqual([da.state, db.state], ['done', 'done'], JSON.stringify([da, db]));
    const [ma, mb] = [(await registered(hub, 'vision-a'))!, (await registered(hub, 'vision-b'))!];
    assert.equal(ma.mmproj?.path, mb.mmproj?.path, 'one projector file for both');
    assert.equal(statSync(ma.mmproj!.path).size, size, 'the projector on disk has the listed size (not two downloads in one file)');
    assert.equal(sha256File(ma.mmproj!.path), sha256File(projector));
    assert.equal(hf.sentFor('mmproj-vision-f16.gguf'), size, 'every byte of it fetched once');
  });

  it('a pull cancelled while another waits on the projector they share leaves its part: the other resumes it and is done', async () => {
    const size = statSync(ensureProjector()).size;
    const { a, b, held } = await bothWaitingOnProjector('eyes');
    const cancelled = await hub.api<{ pull: PullView }>(`/api/pulls/${a.pull!.id}`, { method: 'DELETE' });
    assert.equal(cancelled.body.pull.state, 'cancelled');
    held.release();
    const done = await settled(hub, b.pull!.id);
    assert.equal(done.state, 'done', JSON.stringify(done));
    assert.equal(sha256File((await registered(hub, 'eyes-b'))!.mmproj!.path), sha256File(ensureProjector()));
    // The part the cancelled pull wrote stayed for the other, which resumed it: the projector was not fetched again.
    const asked = hf.requests.filter((r) => r.origin === 'files' && r.path.endsWith('/mmproj-eyes-f16.gguf') && r.sent > 0);
    const from = Number(/^bytes=(\d+)-$/.exec(asked.at(-1)!.range ?? '')?.[1] ?? 0);
    assert.ok(from > 0, `the last request resumed (${JSON.stringify(asked.map((r) => [r.range, r.sent]))})`);
    assert.equal(asked.at(-1)!.sent, size - from, 'the rest, once');
    assert.equal(await registered(hub, 'eyes-a'), undefined);
  });

  it("a file server's refusal (an expired link's 403) is tried again from the resolve URL; what reached the disk is kept", async () => {
    const size = statSync(q4).size;
    hf.dropOnce('cdn-Q4_K_M.gguf', Math.floor(size / 2));
    hf.refuseOnce('cdn-Q4_K_M.gguf', 403, 2, 1); // the two requests after the dropped one
    const p = await pull(hub, 'acme/cdn-GGUF', 'cdn');
    const done = await settled(hub, p.pull!.id);
    assert.equal(done.state, 'done', JSON.stringify(done));
    assert.equal((await registered(hub, 'cdn'))!.sha256, sha256File(q4));
    const asked = hf.requests.filter((r) => r.origin === 'files' && r.path.endsWith('/cdn-Q4_K_M.gguf'));
    assert.equal(asked.length, 4, 'the drop, two refusals, the resume');
    // The part was kept through the refusals: the resume starts at its end (at most what was still in flight when
    // the connection dropped is sent twice, as in the dropped-connection test above).
    const dropAt = Math.floor(size / 2);
    const from = Number(/^bytes=(\d+)-$/.exec(asked.at(-1)!.range ?? '')?.[1]);
    assert.ok(from > 0 && from <= dropAt && dropAt - from <= 256 * 1024, `resumed from ${from}, dropped at ${dropAt}`);
    assert.equal(asked.at(-1)!.sent, size - from, 'the rest, once');
  });

  it('a cleanup that cannot be done (a folder where the part file goes) fails the pull, said in its log; the hub serves on', async () => {
    const part = join(hub.home, 'models', 'acme', 'stuck-GGUF', hf.commit.slice(0, 12), 'stuck-Q4_K_M.gguf.part');
    mkdirSync(join(part, 'in-the-way'), { recursive: true });
    const p = await pull(hub, 'acme/stuck-GGUF', 'stuck');
    const done = await settled(hub, p.pull!.id);
    assert.equal(done.state, 'failed', JSON.stringify(done));
    assert.ok(
      hub.logs.some((l) => l.includes('could not remove a download file')),
      hub.logs.slice(-10).join('\n'),
    );
    assert.equal(hub.proc.exitCode, null, 'the hub still runs');
    assert.equal((await hub.api('/status')).status, 200);
  });

  it('a name that cannot be registered is refused before the Hub is asked for anything', async () => {
    const before = hf.requests.length;
    const r = await pull(hub, 'acme/room1-GGUF', 'no spaces allowed');
    assert.equal(r.status, 400, JSON.stringify(r));
    assert.equal(r.error?.code, 'invalid_request');
    assert.match(r.error?.message ?? '', /model name "no spaces allowed" must be/);
    assert.equal(hf.requests.length, before, 'nothing asked, nothing fetched');
  });

  it('pulls running at once reserve their disk: a second that fits alone but not beside the first is refused', async () => {
    const small = join(hub.home, 'room-disk');
    const unmount = mountSmallDisk(small, 120); // one 34 MB file + the 64 MiB margin fits; two do not
    const tight = await startHub({ env: { ...ENV, HF_ENDPOINT: hf.endpoint, RELAY_DOWNLOAD_DIR: small }, args: ['--cpu-budget-mb', '1000'] });
    const held = hf.holdOnce('room1-Q4_K_M.gguf', Math.floor(statSync(q4).size / 3));
    try {
      const first = await pull(tight, 'acme/room1-GGUF', 'room1');
      assert.equal(first.status, 202, JSON.stringify(first));
      await held.reached;
      const second = await pull(tight, 'acme/room2-GGUF', 'room2');
      assert.equal(second.status, 507, JSON.stringify(second));
      assert.equal(second.error?.code, 'disk_full');
      assert.match(second.error?.message ?? '', /after the \d+ MB the pulls already running will still write/);
      assert.equal(hf.sentFor('room2-Q4_K_M.gguf'), 0, 'not a byte fetched');
      held.release();
      assert.equal((await settled(tight, first.pull!.id)).state, 'done');
    } finally {
      held.release();
      await tight.stop();
      unmount();
    }
  });

  it('a cancelled pull stops and deletes its part file', async () => {
    const size = statSync(q4).size;
    const held = hf.holdOnce('cancel-Q4_K_M.gguf', Math.floor(size / 3));
    const a = await pull(hub, 'acme/cancel-GGUF', 'cancelled');
    await held.reached;
    const r = await hub.api<{ pull: PullView }>(`/api/pulls/${a.pull!.id}`, { method: 'DELETE' });
    held.release();
    assert.equal(r.body.pull.state, 'cancelled');
    assert.equal(await registered(hub, 'cancelled'), undefined);
    const folder = join(hub.home, 'models', 'acme', 'cancel-GGUF', hf.commit.slice(0, 12));
    assert.deepEqual(readdirSync(folder), [], 'its part file is gone');
  });
});
