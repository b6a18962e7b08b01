import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { ensureProjector } from '../fixtures/vision.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until, waitGone } from '../helpers/proc.js';
import { packageVersion } from '../../src/main/core/app-files.js';
import { rawNode } from '../helpers/raw-node.js';

/**
 * The dashboard in a real browser (Debian's chromium driven by playwright-core) against a real hub with two
 * node processes: what it shows, pausing a node from it, live updates without reload, keyboard use, and the
 * banner when the hub goes away. Screenshots land in RELAY_TEST_ARTIFACTS (default ~/.cache/relay/artifacts).
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
// A pause window two days from now: shown on the dashboard, never in force while the test runs.
const SCHEDULE = `${['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'][(new Date().getDay() + 2) % 7]} 03:00-03:01`;
const artifacts = process.env.RELAY_TEST_ARTIFACTS ?? join(homedir(), '.cache', 'relay', 'artifacts');

let hub: HubProcess;
let nodes: NodeProcess[] = [];
let browser: Browser;
let page: Page;

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
  nodes = [await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV, args: ['--schedule', SCHEDULE] }), await startNode(hub, { name: 'south', cpuBudgetMb: 1000, env: ENV })];
  await addModel(hub, { path: fixture('dense'), name: 'small', required_vram_mb: 500 }); // fits a node, not the hub
  await addModel(hub, { path: fixture('dense'), name: 'big', required_vram_mb: 800 }); // fits no single device
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
});
after(async () => {
  await browser?.close();
  for (const n of nodes) await n.stop();
  await hub?.stop();
});

const post = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('dashboard in chromium', { timeout: 300_000 }, () => {
  it('shows the real nodes and a node replica with its kv_cache_type', async () => {
    const r = await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 });
    assert.equal(r.status, 200);
    await page.goto(hub.url);
    await page.getByRole('table', { name: 'Nodes' }).getByText('north').waitFor();
    const nodesText = await page.getByRole('table', { name: 'Nodes' }).innerText();
    assert.match(nodesText, /north\s+idle/);
    assert.match(nodesText, /south\s+idle/);
    const replicas = page.getByRole('table', { name: 'Replicas' });
    await replicas.getByText('small').waitFor();
    assert.match(await replicas.innerText(), /small\s+node (north|south) · CPU\s+ready\s+512 × 1\s+f16/);
    assert.match(await page.locator('#summary').innerText(), /KV cache f16/);
    assert.match(nodesText, new RegExp(`north\\s+idle[\\s\\S]*${SCHEDULE}`));
    assert.match(nodesText, /south\s+idle[\s\S]*always sharing/);
    // The request that placed the replica is in the recent requests, with its tokens.
    const recent = page.getByRole('table', { name: 'Recent requests' });
    await recent.getByText('small').waitFor();
    assert.match(await recent.innerText(), /small\s+completions\s+200\s+\d+ → 2/);
    await page.screenshot({ path: join(artifacts, 'dashboard-replica.png'), fullPage: true });
  });

  it('clicking Pause on a node pauses it: its llama-server stops and the page updates without reload', async () => {
    const s = await hub.status();
    const rep = s.replicas.find((x) => x.model === 'small')!;
    assert.ok(rep.pid !== null && rep.node !== null, 'a node replica with its process');
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42)); // survives only without a reload
    await page.getByRole('button', { name: `Pause sharing on node ${rep.node}` }).click();
    await page.getByRole('table', { name: 'Replicas' }).getByText('No replicas running.').waitFor({ timeout: 30_000 });
    await page.getByRole('button', { name: `Resume sharing on node ${rep.node}` }).waitFor();
    assert.match(await page.getByRole('table', { name: 'Nodes' }).innerText(), new RegExp(`${rep.node}\\s+paused`));
    assert.ok(await waitGone(rep.pid, 30_000), "the node's llama-server stopped");
    assert.equal(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker), 42);
    // Keyboard: the control is a real button, reachable and operable without a mouse.
    await page.getByRole('button', { name: `Resume sharing on node ${rep.node}` }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('button', { name: `Pause sharing on node ${rep.node}` }).waitFor();
  });

  it("shows a shard's stages with the hub holding the output", async () => {
    const r = await post('/v1/completions', { model: 'big', prompt: 'hi', max_tokens: 2 });
    assert.equal(r.status, 200, await r.text());
    const shards = page.getByRole('table', { name: 'Shards' });
    await shards.getByText('big').waitFor();
    const text = await shards.innerText();
    assert.match(text, /hub · CPU · layers 0–\d · output/);
    assert.match(text, /node (north|south) · CPU · layers \d–3/);
    assert.match(text, /f16/);
    await page.screenshot({ path: join(artifacts, 'dashboard-shard.png'), fullPage: true });
  });

  it('charts tok/s per placement and memory per device over the last minutes; the request log filters by model', async () => {
    for (let i = 0; i < 2; i++) assert.equal((await post('/v1/completions', { model: 'small', prompt: `hi ${i}`, max_tokens: 4 })).status, 200);
    // The hub sampled the node's memory since it joined: a page opened now draws those minutes at once.
    const kept = await until(
      async () => (await hub.api<{ series: Record<string, [number, number][]> }>('/api/history')).body.series['mem:north:CPU'] ?? [],
      (k) => k.length >= 3,
      30_000,
    );
    assert.ok(kept.length >= 3, `the hub kept ${kept.length} samples of north's memory`);
    await page.goto(hub.url);
    const northMem = page.getByRole('table', { name: 'Nodes' }).getByRole('img', { name: /^memory used on north CPU/ });
    assert.ok(((await northMem.locator('polyline').getAttribute('points')) ?? '').split(' ').length >= kept.length, "drawn from the hub's history");
    const tps = page.getByRole('table', { name: 'Replicas' }).getByRole('img', { name: /^tok\/s of small on (north|south), over the last [1-5] min: now [\d.]+ tok\/s/ });
    await tps.first().waitFor();
    assert.ok(((await tps.first().locator('polyline').getAttribute('points')) ?? '').split(' ').length >= 2, 'a line, not a dot');
    await page
      .getByRole('table', { name: 'Nodes' })
      .getByRole('img', { name: /^memory used on north CPU, over the last [1-5] min: now \d+\.\d MB/ })
      .waitFor();
    await page
      .getByRole('table', { name: 'Hub devices' })
      .getByRole('img', { name: /^memory used on the hub's CPU/ })
      .waitFor();
    // docs/dashboard.png: a few more requests while the page watches, so the lines have a shape.
    for (let i = 0; i < 6; i++) assert.equal((await post('/v1/completions', { model: 'small', prompt: `more ${i}`, max_tokens: 8 })).status, 200);
    await until(
      async () => ((await tps.first().locator('polyline').getAttribute('points')) ?? '').split(' ').length,
      (n) => n >= 4,
      20_000,
    );
    await page.screenshot({ path: join(artifacts, 'dashboard-charts.png'), fullPage: true });

    const recent = page.getByRole('table', { name: 'Recent requests' });
    const models = async () => (await recent.locator('tbody tr td:nth-child(2)').allInnerTexts()).filter(Boolean);
    await page.getByLabel('Show requests for').selectOption('small');
    const shown = await models();
    assert.ok(shown.length >= 2 && shown.every((m) => m === 'small'), shown.join(','));
    await page.getByLabel('Show requests for').selectOption('big'); // the shard test's request
    const big = await models();
    assert.ok(big.length >= 1 && big.every((m) => m === 'big'), big.join(','));
    await page.getByLabel('Show requests for').selectOption('');
    assert.ok((await models()).includes('small'));
  });

  it("a model's settings are shown and changed from the page; the next placement uses them", async () => {
    await page.goto(hub.url);
    const models = page.getByRole('table', { name: 'Models' });
    await models.getByText('ctx 512 × 1').first().waitFor();
    await page.getByRole('button', { name: 'Settings of small' }).click();
    await page.getByLabel('Context per slot (tokens)').fill('1024');
    await page.getByLabel('KV cache type').selectOption('q8_0');
    await page.getByLabel('Answer length, where a client asks for none (tokens)').fill('64');
    await page.getByLabel('Speculation').selectOption('ngram-cache');
    await page.getByRole('button', { name: 'Save' }).click();
    await models.getByRole('row', { name: /^small .*speculation ngram-cache.*ctx 1024 × 1 · q8_0 \(own\)/ }).waitFor();
    const m = (await hub.api<{ models: { name: string; settings: unknown }[] }>('/api/models')).body.models.find((x) => x.name === 'small');
    assert.deepEqual(m?.settings, { ctx: 1024, kv_cache_type: 'q8_0', max_tokens: 64, spec: 'ngram-cache' });
    assert.equal((await post('/v1/completions', { model: 'small', prompt: 'hi', max_tokens: 2 })).status, 200);
    const rep = (await hub.status()).replicas.find((r) => r.model === 'small' && r.state === 'ready');
    assert.deepEqual([rep?.ctx, rep?.kv_cache_type, rep?.spec], [1024, 'q8_0', 'ngram-cache']);
    // Back to the pool's defaults from the page.
    await page.getByRole('button', { name: 'Settings of small' }).click();
    await page.getByLabel('Context per slot (tokens)').fill('');
    await page.getByLabel('KV cache type').selectOption('');
    await page.getByLabel('Answer length, where a client asks for none (tokens)').fill('');
    await page.getByLabel('Speculation').selectOption('');
    await page.getByRole('button', { name: 'Save' }).click();
    await models.getByRole('row', { name: /^small .*speculation ngram-mod.*ctx 512 × 1 · f16 / }).waitFor();
  });

  it('"Add a node…" shows a one-time token that carries the hub\'s address and the command; relay up needs only the token', async () => {
    await page.goto(`${hub.url}/#add-node`); // what the hub tray's "Add a node…" opens: the panel, no click needed
    const panel = page.getByRole('region', { name: 'Add a node' });
    await panel.waitFor();
    const first = await panel.locator('#add-node-token').innerText();
    await page.getByRole('button', { name: 'Add a node…' }).click(); // another token each time
    await until(
      () => panel.locator('#add-node-token').innerText(),
      (t) => t !== first,
      10_000,
    );
    const token = await panel.locator('#add-node-token').innerText();
    const commands = await panel.locator('#add-node-commands code').evaluateAll((els) => els.map((e) => [e.getAttribute('data-os'), e.textContent]));
    assert.deepEqual(commands, [
      ['linux', `./relay up --token ${token}`],
      ['windows', `.\\relay.exe up --token ${token}`],
      ['npm', `npx relay-llm@${packageVersion()} up --token ${token}`],
    ]);
    assert.match(await panel.innerText(), /Linux: in the folder unpacked from relay-[\d.]+-linux-x64\.tar\.gz/);
    assert.match(await panel.innerText(), /listens on 127\.0\.0\.1 only: a node on another machine cannot reach it/);
    const home = mkdtempSync(join(tmpdir(), 'relay-node-paired-'));
    const paired = await startNode({ url: 'http://unused.invalid', home: hub.home }, { name: 'paired', home, token, env: ENV, hubFromToken: true });
    try {
      await page.getByRole('table', { name: 'Nodes' }).getByText('paired').waitFor();
    } finally {
      await paired.stop();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('a node refused for its version shows "update this node" in the Nodes table and on its card, with both versions', async () => {
    const old = await rawNode(hub, 'old-pc');
    old.send({ ...old.hello, llama: 'version: 1 (commit 0000000)' }); // relay 0.1.0's hello: no relay version, another llama.cpp
    assert.equal((await old.next()).code, 'version_mismatch');
    await page.goto(hub.url);
    const summary = `update this node to relay ${packageVersion()}`;
    await page
      .getByRole('table', { name: 'Nodes' })
      .getByRole('row', { name: new RegExp(`^old-pc offline \\(${summary.replace(/\./g, '\\.')}\\)`) })
      .waitFor();
    const card = page.locator('article[data-machine="old-pc"]');
    assert.match(await card.innerText(), new RegExp(summary.replace(/\./g, '\\.')));
    await card.getByRole('button', { name: /Details of node old-pc/ }).click();
    await page
      .getByText(/the node runs relay 0\.1\.0 or older, the hub relay/)
      .first()
      .waitFor();
  });

  it('imports the GGUFs of a folder on the hub from the page: added, skipped with why, listed in Models', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-dash-import-'));
    try {
      copyFileSync(fixture('dense', 4), join(dir, 'Imported-Q8.gguf'));
      writeFileSync(join(dir, 'mmproj-Imported-f16.gguf'), 'GGUF');
      await page.goto(hub.url);
      await page.getByLabel(/Import the GGUFs already on the hub machine/).selectOption('folder');
      await page.getByLabel('Folder on the hub').fill(dir);
      await page.getByRole('button', { name: 'Import' }).click();
      const result = page.locator('#import-result');
      await result.getByText(/1 added, 0 already registered/).waitFor();
      assert.match(await result.innerText(), /added Imported-Q8[\s\S]*mmproj-Imported-f16\.gguf: Imported-Q8: its projector cannot be used/);
      await page.getByRole('table', { name: 'Models' }).getByText('Imported-Q8').waitFor(); // the next live update lists it
      const m = (await hub.api<{ models: { name: string; path: string }[] }>('/api/models')).body.models.find((x) => x.name === 'Imported-Q8');
      assert.equal(m?.path, join(dir, 'Imported-Q8.gguf'));
    } finally {
      await hub.api('/api/models/Imported-Q8', { method: 'DELETE' });
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a model's projector set from its Settings… dialog; its row then says it sees images (the path on hover)", async () => {
    const r = await hub.api('/api/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: fixture('dense'), name: 'eyes' }) });
    assert.equal(r.status, 201);
    try {
      await page.goto(hub.url);
      await page.getByRole('button', { name: 'Settings of eyes' }).click();
      await page.getByLabel(/Vision projector/).fill(ensureProjector());
      await page.getByRole('button', { name: 'Save' }).click();
      const row = page.getByRole('table', { name: 'Models' }).getByRole('row').filter({ hasText: 'eyes' });
      await row.getByText('sees images').waitFor();
      assert.equal(await row.getByText('sees images').getAttribute('title'), ensureProjector());
      const m = (await hub.api<{ models: { name: string; mmproj?: { path: string } }[] }>('/api/models')).body.models.find((x) => x.name === 'eyes');
      assert.equal(m?.mmproj?.path, ensureProjector());
      // Emptied: text only again.
      await page.getByRole('button', { name: 'Settings of eyes' }).click();
      assert.equal(await page.getByLabel(/Vision projector/).inputValue(), ensureProjector(), 'the dialog shows the projector');
      await page.getByLabel(/Vision projector/).fill('');
      await page.getByRole('button', { name: 'Save' }).click();
      await row.getByText('sees images').waitFor({ state: 'detached' });
    } finally {
      await hub.api('/api/models/eyes', { method: 'DELETE' });
    }
  });

  it("a model's draft model chosen in its Settings… dialog; its row then names it; a draft of another vocabulary is refused", async () => {
    for (const [name, path] of [
      ['deep', fixture('deep')],
      ['little', fixture('dense')],
      ['wide', fixture('widevocab')],
    ] as const) {
      assert.ok([200, 201].includes((await hub.api('/api/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name }) })).status));
    }
    try {
      await page.goto(hub.url);
      const row = page.getByRole('table', { name: 'Models' }).getByRole('row').filter({ hasText: 'deep' });
      await page.getByRole('button', { name: 'Settings of deep' }).click();
      await page.getByLabel(/Draft model/).selectOption('little');
      await page.getByRole('button', { name: 'Save' }).click();
      await row.getByText('draft little').waitFor();
      const m = (await hub.api<{ models: { name: string; draft?: { name: string } }[] }>('/api/models')).body.models.find((x) => x.name === 'deep');
      assert.equal(m?.draft?.name, 'little');
      // Another vocabulary: the dashboard says why, and the draft stays as it was.
      await page.getByRole('button', { name: 'Settings of deep' }).click();
      assert.equal(await page.getByLabel(/Draft model/).inputValue(), 'little', 'the dialog shows the draft');
      await page.getByLabel(/Draft model/).selectOption('wide');
      const said = new Promise<string>((r) =>
        page.once('dialog', (d) => {
          r(d.message());
          void d.dismiss();
        }),
      );
      await page.getByRole('button', { name: 'Save' }).click();
      assert.match(await said, /Could not change the settings of deep: .*vocabularies differ/);
      await page.getByRole('button', { name: 'Settings of deep' }).click();
      await page.getByLabel(/Draft model/).selectOption('');
      await page.getByRole('button', { name: 'Save' }).click();
      await row.getByText('draft little').waitFor({ state: 'detached' });
    } finally {
      for (const n of ['deep', 'little', 'wide']) await hub.api(`/api/models/${n}`, { method: 'DELETE' });
    }
  });

  it('says so clearly when the hub is unreachable', async () => {
    for (const n of nodes) await n.stop();
    nodes = [];
    await hub.stop();
    await page.getByRole('alert').waitFor({ state: 'visible', timeout: 15_000 });
    assert.match(await page.getByRole('alert').innerText(), /unreachable/);
  });
});
