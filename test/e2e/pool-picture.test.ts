import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { StatusDto } from '../../src/shared/status.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * The pool at a glance, in Debian's chromium against a real hub and two real nodes: every machine and device
 * with the placements /status reports, a shard's stages in execution order ending on the hub, a node paused with
 * `relay pause` marked at the next update, the "why not" line of a model that fits nowhere equal to its 503, the
 * charts, and the page at 400 px without sideways scrolling. Its screenshots (pool*.png) go to the run's temp
 * dir; `npm run screenshots` runs it with RELAY_SCREENSHOTS_DIR=docs to renew the README's pictures.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;
const docs = process.env.RELAY_SCREENSHOTS_DIR ?? join(tmpdir(), 'screenshots');

let hub: HubProcess;
let nodes: NodeProcess[] = [];
let browser: Browser;
let page: Page;

const post = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const ask = async (model: string, prompt = 'hi') => {
  const r = await post('/v1/completions', { model, prompt, max_tokens: 4 });
  assert.equal(r.status, 200, await r.text());
};

/** What the picture shows, read from the DOM: machine → state, and machine/device → its segments. */
async function readPicture(p: Page): Promise<{ name: string; state: string; devices: { id: string; bar: string; segments: string[] }[] }[]> {
  // Run in the page (a string: this file is compiled without the DOM's types).
  return p.evaluate(`[...document.querySelectorAll('#pool article.machine')].map((m) => ({
    name: m.dataset.machine,
    state: m.dataset.state,
    devices: [...m.querySelectorAll('.device')].map((d) => ({
      id: d.dataset.device,
      bar: d.querySelector('.membar')?.getAttribute('aria-label') ?? '',
      segments: [...d.querySelectorAll('button[data-placement]')].map((b) => b.dataset.model + ':' + b.dataset.kind + ':' + b.dataset.placement).sort(),
    })),
  }))`);
}

/** The same from /status's own placement lists (not from its picture): the oracle. */
function expected(s: StatusDto) {
  const by = new Map<string, string[]>();
  const put = (machine: string | null, device: string, v: string) => by.set(`${machine ?? 'hub'}/${device}`, [...(by.get(`${machine ?? 'hub'}/${device}`) ?? []), v]);
  for (const r of s.replicas) put(r.node, r.device, `${r.model}:replica:${r.id}`);
  for (const sh of s.shards) for (const st of sh.stages) put(st.node, st.device, `${sh.model}:stage:${sh.id}`);
  const machines = [{ name: 'hub', state: s.hub.availability, devices: s.devices.map((d) => d.id) }, ...s.nodes.map((n) => ({ name: n.name, state: n.state, devices: n.devices.map((d) => d.id) }))];
  return machines.map((m) => ({ name: m.name, state: m.state, devices: m.devices.map((id) => ({ id, segments: (by.get(`${m.name}/${id}`) ?? []).sort() })) }));
}

before(async () => {
  mkdirSync(docs, { recursive: true });
  hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
  nodes = [await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV }), await startNode(hub, { name: 'south', cpuBudgetMb: 1000, env: ENV })];
  await addModel(hub, { path: fixture('dense'), name: 'small', required_vram_mb: 500 }); // fits a node, not the hub
  await addModel(hub, { path: fixture('dense'), name: 'big', required_vram_mb: 800 }); // fits no single device: a shard
  await addModel(hub, { path: fixture('dense'), name: 'huge', required_vram_mb: 4000 }); // fits nowhere
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

describe('the pool at a glance, in chromium', { timeout: 300_000 }, () => {
  it('draws every machine and device with the placements /status reports', async () => {
    await ask('small');
    await ask('big');
    await page.goto(hub.url);
    const s = await until(
      () => hub.status(),
      (x) => x.replicas.some((r) => r.state === 'ready') && x.shards.some((sh) => sh.state === 'ready'),
      30_000,
    );
    const want = expected(s);
    // The page catches up within an update or two; then it says what /status says.
    const shown = await until(
      async () => (await readPicture(page)).map((m) => ({ name: m.name, state: m.state, devices: m.devices.map((d) => ({ id: d.id, segments: d.segments })) })),
      (got) => JSON.stringify(got) === JSON.stringify(want),
      10_000,
    );
    assert.deepEqual(shown, want);
    assert.deepEqual(
      shown.map((m) => m.name),
      ['hub', 'north', 'south'],
    );
    assert.ok(
      shown.flatMap((m) => m.devices).some((d) => d.segments.some((x) => x.startsWith('small:replica'))),
      'the replica is drawn',
    );
    // Each bar says in words what it holds and how much is free (the picture's text alternative).
    for (const m of await readPicture(page)) {
      for (const d of m.devices) {
        const dev = m.name === 'hub' ? s.devices.find((x) => x.id === d.id)! : s.nodes.find((n) => n.name === m.name)!.devices.find((x) => x.id === d.id)!;
        assert.match(d.bar, new RegExp(`^${m.name} ${d.id}: .*free ${Math.round(dev.free_mb)} MB of ${Math.round(dev.total_mb)} MB$`));
      }
    }
    await page.screenshot({ path: join(docs, 'pool.png'), fullPage: false });
  });

  it("draws a shard's stages in execution order, ending on the hub where the token is made", async () => {
    const s = await hub.status();
    const sh = s.shards.find((x) => x.model === 'big')!;
    const stages = await page
      .locator(`li.flow[data-shard="${sh.id}"] li.stage`)
      .evaluateAll((els) => els.map((e) => ({ machine: e.getAttribute('data-machine'), output: (e.getAttribute('class') ?? '').split(' ').includes('output') })));
    const order = [...sh.stages].sort((a, b) => a.index - b.index).map((st) => st.node ?? 'hub');
    assert.deepEqual(
      stages.slice(0, order.length).map((x) => x.machine),
      order,
    );
    assert.equal(stages.at(-1)?.machine, 'hub', 'the flow ends on the hub');
    assert.equal(stages.at(-1)?.output, true, 'marked as the output stage');
    assert.ok(order.includes('north') || order.includes('south'), `a node runs a stage: ${order.join(' → ')}`);
  });

  it("shows each device's speed, each node's link and a shard's predicted beside its measured ms per token, as /status says", async () => {
    const read = (): Promise<{ speeds: string[]; links: string[]; timing: string[] }> =>
      page.evaluate(`({
        speeds: [...document.querySelectorAll('#pool article.machine')].flatMap((m) => [...m.querySelectorAll('.device')].map((d) => m.dataset.machine + '/' + d.dataset.device + ': ' + (d.querySelector('.speed')?.textContent ?? ''))),
        links: [...document.querySelectorAll('#pool article.machine')].map((m) => m.dataset.machine + ': ' + (m.querySelector('.link-speed')?.textContent ?? '')),
        timing: [...document.querySelectorAll('#pool li.flow .timing')].map((t) => t.textContent),
      })`);
    const want = (s: StatusDto) => {
      const speed = (sp: StatusDto['devices'][number]['speed']) =>
        sp ? `${sp.ms_per_gib} ms/GiB${sp.source === 'measured' ? '' : sp.source === 'bandwidth' ? ` (from ${sp.mem_gbps} GB/s)` : ' (default)'}` : '';
      return {
        speeds: [...s.devices.map((d) => `hub/${d.id}: ${speed(d.speed)}`), ...s.nodes.flatMap((n) => n.devices.map((d) => `${n.name}/${d.id}: ${speed(d.speed)}`))],
        links: [
          'hub: ',
          ...s.nodes.map(
            (n) =>
              `${n.name}: ${n.link?.rtt_ms == null ? 'round trip not yet measured' : `${n.link.rtt_ms} ms round trip`}` +
              (n.link?.bytes_per_s == null ? '' : `, pushes at ${Math.round(n.link.bytes_per_s / 1048576)} MB/s`),
          ),
        ],
        timing: s.shards.map((sh) => `predicted ${sh.predicted_ms_per_token} ms/token${sh.ms_per_token !== null ? `, measured ${sh.ms_per_token}` : ''}`),
      };
    };
    // A shard's stages are measured once its bridges saw 8 round trips since the load: one answer long enough.
    const r = await post('/v1/completions', { model: 'big', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
    assert.equal(r.status, 200, await r.text());
    let s = await hub.status();
    const shown = await until(
      async () => {
        s = await hub.status();
        return read();
      },
      (got) => JSON.stringify(got) === JSON.stringify(want(s)),
      10_000,
    );
    assert.deepEqual(shown, want(s));
    // The shard's answers measured every device it ran on (and the node replica's its own).
    const measured = [...s.devices.map((d) => d.speed?.source), ...s.nodes.flatMap((n) => n.devices.map((d) => d.speed?.source))];
    assert.ok(
      measured.every((x) => x === 'measured'),
      measured.join(),
    );
    assert.ok(s.nodes.every((n) => n.link?.rtt_ms != null));
  });

  it('clicking a placement or a machine opens its details', async () => {
    const s = await hub.status();
    const rep = s.replicas.find((r) => r.model === 'small')!;
    await page.locator(`#pool button[data-placement="${rep.id}"]`).click();
    const dialog = page.getByRole('dialog');
    await dialog.waitFor();
    assert.match(await dialog.innerText(), new RegExp(`small: replica on node ${rep.node} · CPU[\\s\\S]*ctx × slots\\s+512 × 1`));
    await dialog.getByRole('button', { name: 'Close' }).click();
    await page.getByRole('button', { name: /^Details of node north/ }).click();
    assert.match(await page.getByRole('dialog').innerText(), /Node north[\s\S]*last seen/);
    await page.getByRole('dialog').getByRole('button', { name: 'Close' }).click();
  });

  it('a model that fits nowhere says why in one line, the same line as its 503', async () => {
    const r = await post('/v1/completions', { model: 'huge', prompt: 'hi', max_tokens: 2 });
    assert.equal(r.status, 503);
    const body = (await r.json()) as { error: { code: string; details: { why_not: string } } };
    assert.equal(body.error.code, 'model_unavailable');
    assert.match(body.error.details.why_not, /^needs \d+ MB; largest free room \d+ MB \((hub|north|south) CPU\); no machine of this pool can hold it/);
    const line = page.locator('#pool li[data-model="huge"] .why-not');
    await until(
      () => line.innerText(),
      (t) => t === body.error.details.why_not,
      10_000,
    );
    assert.equal(await line.innerText(), body.error.details.why_not);
    assert.equal((await hub.status()).models.find((m) => m.name === 'huge')?.why_not, body.error.details.why_not);
  });

  it('a node paused with relay pause is marked paused at the next update, and why', async () => {
    const north = nodes[0]!;
    const before = Number(await page.locator('body').getAttribute('data-snapshots'));
    const out = await promisify(execFile)(process.execPath, [relayBin, 'pause', '--home', north.home]);
    assert.match(out.stdout, /paused: node is paused/);
    const card = page.locator('#pool article[data-machine="north"]');
    await page.locator('#pool article[data-machine="north"][data-state="paused"]').waitFor({ timeout: 30_000 });
    // The hub sends a snapshot each second when something changed: the pause is in the first or second one.
    const seenAt = Number(await page.locator('body').getAttribute('data-snapshots'));
    assert.ok(seenAt - before <= 2, `shown ${seenAt - before} updates after the pause`);
    assert.match(await card.innerText(), /paused\s+paused by the owner/);
    assert.equal((await hub.status()).nodes.find((n) => n.name === 'north')?.state, 'paused');
    await promisify(execFile)(process.execPath, [relayBin, 'resume', '--home', north.home]);
    await page.locator('#pool article[data-machine="north"][data-state="idle"]').waitFor({ timeout: 30_000 });
  });

  it('charts tokens per model, memory per device, requests and errors with axes and a legend', async () => {
    for (let i = 0; i < 3; i++) await ask('small', `more ${i}`);
    // The hub turns its counters into rates every 5 s; the page fetches them again as often.
    const tokens = page.locator('#chart-tokens');
    await until(
      () => tokens.innerText(),
      (t) => /small/.test(t),
      30_000,
    );
    assert.match(await tokens.locator('figcaption').innerText(), /Tokens generated per second, by model \(tok\/s\)/);
    assert.match((await tokens.getByRole('img').getAttribute('aria-label')) ?? '', /^Tokens generated per second, by model over the last [1-5] min: .*\bsmall now [\d.]+ tok\/s/);
    assert.ok((await tokens.locator('g.axis text').allTextContents()).includes('now'), 'an x axis in minutes before now');
    const memory = await page.locator('#chart-memory .legend').innerText();
    for (const d of ['hub CPU', 'north CPU', 'south CPU']) assert.match(memory, new RegExp(`${d} \\d+ MB`));
    await until(
      () => page.locator('#chart-requests .legend').innerText(),
      (t) => /all of \/v1 [\d.]+ req\/min/.test(t),
      30_000,
    );
    assert.match(await page.locator('#chart-errors .legend').innerText(), /answered with an error [\d.]+ %/);
    await page.locator('section[aria-labelledby="h-charts"]').screenshot({ path: join(docs, 'pool-charts.png') });
  });

  it('draws a loading placement against its deadline, a push in progress and a backoff on their machine', async () => {
    // These last a second or two on the tiny fixture: the page's own drawing is given a real /status with them set.
    const s = await hub.status();
    const north = s.machines.find((m) => m.name === 'north')!;
    const seg = north.devices[0]!.segments[0] ?? s.machines.flatMap((m) => m.devices.flatMap((d) => d.segments))[0]!;
    const changed = {
      ...s,
      machines: s.machines.map((m) =>
        m.name !== 'north'
          ? m
          : {
              ...m,
              backoffs: [{ model: 'huge', reason: 'load failed: out of memory', until: '2026-12-02T10:05:00.000Z' }],
              pushes: [{ model: 'big', done: 30, total: 120 }],
              devices: m.devices.map((d, i) => (i === 0 ? { ...d, segments: [{ ...seg, state: 'starting', load: { since: '', elapsed_ms: 12_000, deadline_ms: 90_000 } }] } : d)),
            },
      ),
    };
    const html = await page.evaluate((x) => (globalThis as unknown as { drawPool(x: unknown): string }).drawPool(x), changed);
    assert.match(html, /kept off huge until 10:05 UTC: load failed: out of memory/);
    assert.match(html, /receiving big <progress max="120" value="30"[^>]*aria-label="push of big to north"><\/progress> 25%/);
    assert.match(html, new RegExp(`${seg.model}, [^"]*loading 12 s of 90 s`));
    assert.match(html, /<progress max="90000" value="12000" aria-label="loading [^"]+ against its deadline">/);
  });

  it('reads at 400 px wide without sideways scrolling', async () => {
    await page.setViewportSize({ width: 400, height: 860 });
    await page.goto(hub.url);
    await page.locator('#pool article[data-machine="south"]').waitFor();
    const widths = await page.evaluate<{ page: number; view: number }>('({ page: document.documentElement.scrollWidth, view: window.innerWidth })');
    assert.ok(widths.page <= widths.view, `the page is ${widths.page} px wide in a ${widths.view} px window`);
    // Every machine card fits the window.
    const cards = await page.locator('#pool article.machine').evaluateAll((els) => els.map((e) => e.getBoundingClientRect().right));
    assert.ok(cards.length === 3 && cards.every((r) => r <= 400), cards.join(','));
    await page.screenshot({ path: join(docs, 'pool-narrow.png'), fullPage: false });
  });
});
