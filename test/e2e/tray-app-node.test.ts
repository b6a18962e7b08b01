import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import type { AppState } from '../../src/shared/ipc.js';
import { AppController } from '../../src/main/app/controller.js';
import { buildTrayMenu, statusLine, trayIcon } from '../../src/main/app/tray-menu.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { listeningSockets, mintToken } from '../helpers/node.js';
import { alive, until, waitGone } from '../helpers/proc.js';
import { artifacts, completion, pagesUrl, quiet, RecordingShell, relayBin, rpcServerPids, TRAY_ENV as ENV } from '../helpers/tray.js';

/**
 * The tray app without Electron's binary (it cannot be downloaded on these machines): the same controller
 * src/main/electron/main.ts runs, with the real embedded hub, the real node agent and real llama.cpp
 * processes; the shell (tray, window, login item) is a recorder. Node mode here (hub mode and the app process: tray-app.test.ts). The setup page runs in Debian's chromium,
 * with the preload's `window.relay` bridge reproduced by playwright's exposeFunction → controller.handleIpc,
 * the sender being the page's own URL, as Electron's senderFrame.url would be.
 */
Object.assign(process.env, ENV); // the embedded hub and agent read these, as the app's own process would

describe('tray app, node mode (set up from the page in chromium, paused from the tray)', { timeout: 300_000 }, () => {
  const userData = mkdtempSync(join(tmpdir(), 'relay-app-node-'));
  const shell = new RecordingShell();
  let hub: HubProcess;
  let app: AppController;
  let browser: Browser;

  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
    await addModel(hub, { path: fixture('dense'), name: 'small', required_vram_mb: 500 }); // fits the node, not the hub
    await addModel(hub, { path: fixture('dense'), name: 'big', required_vram_mb: 800 }); // fits no single device: a shard
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    });
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
    await hub?.stop();
  });

  const hubNode = async (name: string) => {
    const s = await hub.status();
    return s.nodes.find((n) => n.name === name);
  };

  it('the setup page joins the hub with a token; the node agent connects and the dashboard opens', async () => {
    app = new AppController({ userData, shell, log: quiet(), pagesUrl, defaults: { hubPort: 0, cpuBudgetMb: 1000 }, heartbeatMs: 500 });
    await app.start();
    assert.deepEqual(shell.windows, [{ page: 'setup' }]);
    const token = await mintToken(hub);
    const page = await browser.newPage();
    await page.exposeFunction('__relayInvoke', (channel: string, payload: unknown) => app.handleIpc(channel, payload, page.url()));
    await page.addInitScript(() => {
      const call = (c: string, p: unknown = null) => (globalThis as unknown as { __relayInvoke: (c: string, p: unknown) => Promise<unknown> }).__relayInvoke(c, p);
      (globalThis as unknown as { relay: unknown }).relay = {
        getState: () => call('relay:get-state'),
        setup: (r: unknown) => call('relay:setup', r),
        setPaused: (p: boolean) => call('relay:set-paused', p),
        openDashboard: () => call('relay:open-dashboard'),
        onState: () => undefined,
      };
    });
    await page.goto(`${pagesUrl}setup.html`);
    // A wrong token is refused with the hub's message and changes nothing.
    await page.getByLabel('a node').check();
    await page.getByLabel('Hub URL').fill(hub.url);
    await page.getByLabel(/Join token/).fill('not-a-token');
    await page.getByLabel(/Name/).fill('attic');
    await page.getByRole('button', { name: 'Start' }).click();
    await page.getByRole('alert').getByText(/token/i).waitFor({ timeout: 15_000 });
    assert.equal(app.state().mode, null);
    const refused = await app.handleIpc('relay:setup', { mode: 'node', hubUrl: hub.url, token: 'not-a-token' }, `${pagesUrl}setup.html`);
    assert.deepEqual([refused.ok, !refused.ok && refused.code], [false, 'NODE_AUTH']);
    const away = await app.handleIpc('relay:setup', { mode: 'node', hubUrl: 'http://127.0.0.1:9', token: token }, `${pagesUrl}setup.html`);
    assert.deepEqual([away.ok, !away.ok && away.code], [false, 'HUB_UNREACHABLE']);
    // The right one, as the dashboard's "Add a node…" makes it: it carries the hub's address, so pasting it
    // fills the hub URL. The agent joins and connects, and the page asks for the dashboard.
    const paired = ((await (await fetch(`${hub.url}/api/nodes/token`, { method: 'POST' })).json()) as { token: string }).token;
    await page.getByLabel('Hub URL').fill('');
    await page.getByLabel(/Join token/).fill(paired);
    assert.equal(await page.getByLabel('Hub URL').inputValue(), hub.url);
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: join(artifacts, 'setup.png') });
    await page.getByRole('button', { name: 'Start' }).click();
    await until(
      () => shell.windows.length,
      (n) => n >= 2,
      60_000,
    );
    // The hub is another machine to a node: "Open dashboard" opens a one-time read-only login link that the
    // node asked for with its credential. It logs a browser in once (HttpOnly, SameSite=Strict cookie).
    const opened = (shell.windows.at(-1) as { url: string }).url;
    assert.ok(opened.startsWith(`${hub.url}/login?t=`), opened);
    const login = await fetch(opened, { redirect: 'manual' });
    assert.equal(login.status, 303);
    assert.match(login.headers.get('set-cookie') ?? '', /^relay_session=[^;]+; HttpOnly; SameSite=Strict/);
    assert.equal((await fetch(opened, { redirect: 'manual' })).status, 401, 'the link works once');
    assert.equal(app.navigationAllowed(opened), true, 'the app window may open it');
    await page.close();
    const s = await until(
      () => app.state(),
      (x) => x.node?.connected === true,
      20_000,
    );
    assert.equal(s.mode, 'node');
    assert.equal(s.node!.name, 'attic');
    assert.equal(trayIcon(s), 'node-idle');
    assert.equal(statusLine(s), 'Idle, sharing');
    assert.equal((await hubNode('attic'))?.state, 'idle');
    // The node's settings (credential, not the token) live in the app's data dir, readable only by the user.
    const ns = JSON.parse(readFileSync(join(userData, 'node', 'node.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(ns.hub, hub.url);
    assert.notEqual(ns.credential, token);
    assert.equal(statSync(join(userData, 'node', 'node.json')).mode & 0o077, 0);
  });

  it('the status line names the replica the hub placed here', async () => {
    const res = await completion(hub.url, 'small');
    assert.equal(res.status, 200, await res.text());
    const s = await until(
      () => app.state(),
      (x) => (x.node?.replicas.length ?? 0) > 0,
      10_000,
    );
    assert.equal(statusLine(s), 'Running: replica of small');
  });

  it('"Pause sharing" in the tray pauses like `relay pause`: the hub stops this node\'s llama-server', async () => {
    const rep = (await hub.status()).replicas.find((r) => r.model === 'small')!;
    assert.ok(rep.pid && alive(rep.pid));
    const item = buildTrayMenu(app.state()).find((i) => i.action === 'toggle-pause')!;
    assert.deepEqual([item.label, item.checked], ['Pause sharing', false]);
    await app.onTray(item.action!);
    assert.ok(await waitGone(rep.pid, 30_000), "the node's llama-server stopped within 30 s");
    await until(
      () => hub.status(),
      (s) => !s.replicas.some((r) => r.model === 'small'),
      30_000,
    );
    assert.equal((await hubNode('attic'))?.state, 'paused');
    const s = app.state();
    assert.equal(trayIcon(s), 'node-paused');
    assert.equal(statusLine(s), 'Sharing paused');
    assert.equal(buildTrayMenu(s).find((i) => i.action === 'toggle-pause')?.checked, true);
    // `relay resume` on the same data dir reaches the same agent (its local API): one path for both.
    // (spawned, not spawnSync: the agent's local API runs in this very process and must keep answering)
    const cli = spawn(process.execPath, [relayBin, 'resume', '--home', join(userData, 'node')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    cli.stderr.on('data', (c: Buffer) => (err += c.toString()));
    assert.equal(await new Promise((r) => cli.once('exit', r)), 0, err);
    await until(
      () => hubNode('attic'),
      (n) => n?.state === 'idle',
      10_000,
    );
    assert.equal(trayIcon(app.state()), 'node-idle');
  });

  it('a shard stage on this node shows as "shard stage k of n of M"', async () => {
    const res = await completion(hub.url, 'big');
    assert.equal(res.status, 200, await res.text());
    const s = await until(
      () => app.state(),
      (x) => (x.node?.stages.length ?? 0) > 0,
      10_000,
    );
    const st = s.node!.stages[0]!;
    assert.equal(st.model, 'big');
    assert.equal(st.of, 2);
    assert.equal(statusLine(s), `Running: shard stage ${st.index + 1} of 2 of big`);
  });

  it('changing mode to hub stops the agent and its rpc-server; the old hub sees the node leave', async () => {
    const rpcPids = rpcServerPids();
    assert.ok(rpcPids.length > 0, "the shard's ggml-rpc-server runs under this process");
    // Two at once (a double click): they run one after the other and one hub is left running.
    const [r, again] = await Promise.all([1, 2].map(() => app.handleIpc('relay:setup', { mode: 'hub', lan: false }, `${pagesUrl}setup.html`)));
    assert.ok(again!.ok, JSON.stringify(again));
    assert.ok(r!.ok, JSON.stringify(r));
    assert.equal((r!.value as AppState).mode, 'hub');
    assert.equal(app.agent, null);
    // The hub the first setup started was stopped by the second: only the current one listens.
    const hubPorts = listeningSockets(process.pid).map((x) => x.port);
    assert.ok(hubPorts.includes(Number(new URL(app.hub!.url).port)));
    const first = (r!.value as AppState).hub?.url;
    if (first && first !== app.hub!.url) assert.ok(!hubPorts.includes(Number(new URL(first).port)), 'the first hub was stopped');
    for (const pid of rpcPids) assert.ok(await waitGone(pid, 15_000), `ggml-rpc-server ${pid} stopped`);
    await until(
      () => hubNode('attic'),
      (n) => n?.connected === false,
      15_000,
    );
    assert.equal((await hubNode('attic'))?.connected, false);
    assert.equal(trayIcon(app.state()), 'hub-idle');
  });
});
