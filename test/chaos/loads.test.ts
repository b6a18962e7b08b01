import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY } from '../helpers/openai.js';
import { until, waitGone } from '../helpers/proc.js';
import { slowDisk, type SlowDisk } from '../helpers/slowfs.js';

/**
 * Loads of real size, honestly slow: the node's copy of the model sits on a slow disk (a FUSE mount whose reads
 * are paced, test/helpers/slowfs.c), so llama-server takes seconds to load it, as a 40 GB model from a spinning
 * disk takes minutes. The deadline rule is set small (a 2 s base) so a load outlasts what a small model gets;
 * the model's size earns it more. Mid-load, a settings change or the owner's pause kills the loading process,
 * and the hub can resume only its own pause of a node, never its owner's.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const MB = 1024 * 1024;
const GIB = 1024 ** 3;
const BASE_MS = 2000;
const PER_GIB_MS = 200_000; // the large fixture (137 MiB) gets 2 s + 26.7 s
const sha256 = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

/** A node whose cache holds `model` on the slow disk (as if its cache folder were on a USB disk). */
function slowNodeHome(disk: SlowDisk, model: string): string {
  const home = mkdtempSync(join(tmpdir(), 'relay-node-slow-'));
  mkdirSync(join(home, 'cache', 'models'), { recursive: true });
  symlinkSync(join(disk.dir, basename(model)), join(home, 'cache', 'models', `${sha256(model)}.gguf`));
  return home;
}

async function pool(disk: SlowDisk, perGibMs: number): Promise<{ hub: HubProcess; node: NodeProcess }> {
  // The hub has no device of its own: the node is the only place for the model.
  const hub = await startHub({ env: { ...ENV, RELAY_LOAD_TIMEOUT_MS: String(BASE_MS), RELAY_LOAD_MS_PER_GIB: String(perGibMs) } });
  await addModel(hub, { path: fixture('large'), name: 'big', required_vram_mb: 400 });
  const node = await startNode(hub, { name: 'usb', cpuBudgetMb: 1500, env: ENV, home: slowNodeHome(disk, fixture('large')) });
  return { hub, node };
}

const complete = (hub: HubProcess) =>
  fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'big', prompt: 'Once upon a time', max_tokens: 8, ...GREEDY }) });

/** The node's loading replica of big, as the hub's /status shows it (pid and load from the node's reports). */
async function loading(hub: HubProcess) {
  const r = await until(
    async () => (await hub.status()).replicas.find((x) => x.model === 'big' && x.state === 'starting' && x.load !== null && x.pid !== null),
    (x) => x !== undefined,
    30_000,
  );
  assert.ok(r, 'a replica of big is loading on the node');
  return r;
}

describe('loads of real size, from a slow disk', { timeout: 300_000 }, () => {
  let disk: SlowDisk;
  const size = statSync(fixture('large')).size;
  before(async () => {
    disk = await slowDisk(dirname(fixture('large')), 24 * MB); // ~6 s for the 137 MiB model
  });
  after(async () => {
    await disk?.close();
  });

  it('with the base alone (2 s) the load fails with load_timeout: it really lasts longer than a small model is given', async () => {
    const { hub, node } = await pool(disk, 0);
    try {
      const res = await complete(hub);
      const j = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(res.status, 502);
      assert.equal(j.error.code, 'load_timeout', j.error.message);
      assert.match(j.error.message, /deadline of 2 s/);
      assert.deepEqual(
        (await hub.status()).backoffs.map((b) => [b.node, b.model]),
        [['usb', 'big']],
        'a deadline overrun counts against the node',
      );
      await until(
        async () => ((await node.local('/status')).replicas as unknown[]).length,
        (n) => n === 0,
      );
    } finally {
      await node.stop();
      await hub.stop();
    }
  });

  describe('with a term per GiB', () => {
    let hub: HubProcess;
    let node: NodeProcess;
    before(async () => {
      ({ hub, node } = await pool(disk, PER_GIB_MS));
    });
    after(async () => {
      await node?.stop();
      await hub?.stop();
    });

    it('the same load succeeds: its size earns the time; /status and the dashboard show it loading against that deadline', async () => {
      const req = complete(hub);
      const r = await loading(hub);
      assert.equal(r.load!.deadline_ms, Math.round(BASE_MS + (PER_GIB_MS * size) / GIB), 'base + per-GiB × size');
      assert.ok(r.load!.elapsed_ms <= r.load!.deadline_ms);
      const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
      try {
        const page = await browser.newPage();
        await page.goto(hub.url);
        const row = page.getByRole('table', { name: 'Replicas' }).getByRole('row').filter({ hasText: 'node usb' });
        await row.filter({ hasText: /loading \d+ s of 29 s/ }).waitFor({ timeout: 20_000 });
      } finally {
        await browser.close();
      }
      const res = await req;
      assert.equal(res.status, 200, await res.clone().text());
      const st = await hub.status();
      assert.deepEqual(
        st.replicas.map((x) => [x.node, x.state, x.load]),
        [['usb', 'ready', null]],
      );
      assert.deepEqual(st.backoffs, []);
    });

    it('a settings change mid-load kills the loading llama-server; the next placement starts once it is gone', async () => {
      const pid = (await hub.status()).replicas.find((x) => x.model === 'big')!.pid!;
      const stopped = await hub.api('/api/models/big', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ context_size: 256 }) });
      assert.equal(stopped.status, 200);
      assert.ok(await waitGone(pid, 30_000));
      const req = complete(hub);
      const r = await loading(hub);
      const change = await hub.api('/api/models/big', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ context_size: 512 }) });
      assert.equal(change.status, 200);
      assert.ok(await waitGone(r.pid!, 30_000), 'the loading process was killed, not left to finish');
      const res = await req; // re-planned with the new settings, once the node's device was free again
      assert.equal(res.status, 200, await res.clone().text());
      const st = await hub.status();
      assert.deepEqual(
        st.replicas.filter((x) => x.state !== 'failed').map((x) => [x.node, x.state, x.ctx]),
        [['usb', 'ready', 512]],
      );
      assert.notEqual(st.replicas.find((x) => x.state === 'ready')!.pid, r.pid);
    });

    it("the owner pausing mid-load releases the device in ≤ 30 s; the hub's Resume cannot undo the owner's pause", async () => {
      const pid = (await hub.status()).replicas.find((x) => x.model === 'big')!.pid!;
      await hub.api('/api/models/big', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ context_size: 256 }) });
      assert.ok(await waitGone(pid, 30_000));
      const req = complete(hub);
      const r = await loading(hub);
      await node.local('/pause', 'POST'); // the tray's "Pause sharing" / `relay pause`
      assert.ok(await waitGone(r.pid!, 30_000), "the loading llama-server is gone within 30 s: the owner's card is free");
      const res = await req;
      assert.equal(res.status, 503);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'pool_busy', 'it fits again when the node returns');

      const resumed = await hub.api<{ availability: string; reason: string }>('/api/nodes/usb/resume', { method: 'POST' });
      assert.deepEqual([resumed.status, resumed.body.availability, resumed.body.reason], [200, 'paused', 'paused by the owner']);
      assert.equal((await node.local('/status')).availability, 'paused', "the owner's pause stands");
      await node.local('/resume', 'POST');
      await until(
        async () => (await hub.status()).nodes.find((n) => n.name === 'usb')?.state,
        (s) => s === 'idle',
      );
      // The hub's own pause, and its resume, work as before.
      const paused = await hub.api<{ availability: string; reason: string }>('/api/nodes/usb/pause', { method: 'POST' });
      assert.deepEqual([paused.body.availability, paused.body.reason], ['paused', "paused by the hub's owner"]);
      const back = await hub.api<{ availability: string }>('/api/nodes/usb/resume', { method: 'POST' });
      assert.equal(back.body.availability, 'idle');
    });
  });

  it("pausing the hub's own devices mid-load kills its loading llama-server; the reservation goes with the process", async () => {
    const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
    try {
      // The model itself on the slow disk: the hub's own load takes seconds (its registration hashes it slowly too).
      await addModel(hub, { path: join(disk.dir, basename(fixture('dense'))), name: 'm', required_vram_mb: 300 });
      const req = fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', prompt: 'Hi', max_tokens: 4, ...GREEDY }) });
      const r = await until(
        async () => (await hub.status()).replicas.find((x) => x.state === 'starting' && x.load !== null && x.pid !== null),
        (x) => x !== undefined,
        30_000,
      );
      assert.equal(r?.node, null, 'a host replica');
      const paused = await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
      assert.equal(paused.status, 200);
      assert.ok(await waitGone(r.pid!, 30_000), 'the loading llama-server was killed');
      const res = await req;
      assert.equal(res.status, 503);
      const st = await hub.status();
      assert.deepEqual(
        st.replicas.filter((x) => x.state !== 'failed'),
        [],
        'nothing holds the device any more',
      );
      assert.equal(st.devices[0]!.free_mb, st.devices[0]!.total_mb, 'its reservation is gone with it');
    } finally {
      await hub.stop();
    }
  });

  it("the node's llama-server stopped (SIGSTOP) mid-load: its start fails at once, not at its deadline; another node serves", async () => {
    const hub = await startHub({ env: { ...ENV, RELAY_LOAD_TIMEOUT_MS: String(BASE_MS), RELAY_LOAD_MS_PER_GIB: String(PER_GIB_MS) } });
    // Registered first: a node's copy of a model the hub does not own is evicted when it connects.
    await addModel(hub, { path: fixture('large'), name: 'big', required_vram_mb: 400 });
    const usb = await startNode(hub, { name: 'usb', cpuBudgetMb: 1500, env: ENV, home: slowNodeHome(disk, fixture('large')) });
    const fast = await startNode(hub, { name: 'fast', cpuBudgetMb: 1500, env: ENV });
    try {
      const req = complete(hub); // usb holds the file: it loads there, slowly
      const r = await loading(hub);
      assert.equal(r.node, 'usb');
      process.kill(r.pid!, 'SIGSTOP'); // frozen mid-load
      const res = await req;
      assert.equal(res.status, 200, await res.clone().text());
      const st = await hub.status();
      assert.ok(
        st.replicas.some((x) => x.node === 'fast' && x.state === 'ready'),
        'served by the other node',
      );
      assert.match(st.backoffs.find((b) => b.node === 'usb')?.reason ?? '', /stopped \(SIGSTOP\?\) while it loaded/);
      assert.ok(await waitGone(r.pid!, 30_000), 'the frozen process was killed');
    } finally {
      await usb.stop();
      await fast.stop();
      await hub.stop();
    }
  });
});
