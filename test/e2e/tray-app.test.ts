import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import type { AppState } from '../../src/shared/ipc.js';
import { AppController, type AppShell } from '../../src/main/app/controller.js';
import { buildTrayMenu, statusLine, trayIcon } from '../../src/main/app/tray-menu.js';
import { createLogger } from '../../src/main/core/log.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { listeningSockets, mintToken } from '../helpers/node.js';
import { alive, killAllJsonLineProcesses, startJsonLineProcess, until, waitGone } from '../helpers/proc.js';
import { tokenHubUrl } from '../../src/main/core/pool/tokens.js';

/**
 * The tray app without Electron's binary (it cannot be downloaded on these machines): the same controller
 * src/main/electron/main.ts runs, with the real embedded hub, the real node agent and real llama.cpp
 * processes; the shell (tray, window, login item) is a recorder. The setup page runs in Debian's chromium,
 * with the preload's `window.relay` bridge reproduced by playwright's exposeFunction → controller.handleIpc,
 * the sender being the page's own URL, as Electron's senderFrame.url would be.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
Object.assign(process.env, ENV); // the embedded hub and agent read these, as the app's own process would
const repo = new URL('../../../', import.meta.url).pathname;
const pagesUrl = `${pathToFileURL(join(repo, 'src', 'renderer')).href}/`;
const relayBin = join(repo, 'bin', 'relay.js');
const artifacts = process.env.RELAY_TEST_ARTIFACTS ?? join(homedir(), '.cache', 'relay', 'artifacts');
const quiet = () => createLogger({ name: 'tray-test', level: process.env.RELAY_LOG_LEVEL ?? 'warn', pretty: false });

class RecordingShell implements AppShell {
  windows: ({ page: 'setup' } | { url: string })[] = [];
  loginItem: boolean | null = null;
  quits = 0;
  last: AppState | null = null;
  openWindow(t: { page: 'setup' } | { url: string }) {
    this.windows.push(t);
  }
  setLoginItem(open: boolean) {
    this.loginItem = open;
  }
  quit() {
    this.quits++;
  }
  render(s: AppState) {
    this.last = s;
  }
}

/** ggml-rpc-server processes that are children of this test process (the embedded agent's). */
function rpcServerPids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number)
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === process.pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('ggml-rpc-server');
      } catch {
        return false;
      }
    });
}

const completion = (url: string, model: string, key?: string) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }),
  });

describe('tray app, hub mode (embedded hub in the app process)', { timeout: 240_000 }, () => {
  const userData = mkdtempSync(join(tmpdir(), 'relay-app-hub-'));
  const shell = new RecordingShell();
  let app: AppController;

  after(async () => app?.stop());

  it('first run: shows the setup page and a "set up" tray; nothing runs yet', async () => {
    app = new AppController({ userData, shell, log: quiet(), pagesUrl, defaults: { hubPort: 0, cpuBudgetMb: 800 } });
    await app.start();
    assert.deepEqual(shell.windows, [{ page: 'setup' }]);
    assert.equal(trayIcon(shell.last!), 'setup');
    assert.equal(statusLine(shell.last!), 'Not set up yet');
    assert.equal(app.running, false);
  });

  it("setup is refused to any sender but the app's own pages, and to bad payloads", async () => {
    const evil = await app.handleIpc('relay:setup', { mode: 'hub' }, 'https://evil.example/setup.html');
    assert.deepEqual([evil.ok, !evil.ok && evil.code], [false, 'FORBIDDEN']);
    const sibling = await app.handleIpc('relay:setup', { mode: 'hub' }, `${pagesUrl.slice(0, -1)}-evil/setup.html`);
    assert.deepEqual([sibling.ok, !sibling.ok && sibling.code], [false, 'FORBIDDEN']);
    const bad = await app.handleIpc('relay:setup', { mode: 'router' }, `${pagesUrl}setup.html`);
    assert.deepEqual([bad.ok, !bad.ok && bad.code], [false, 'INVALID_ARGUMENT']);
    const unknown = await app.handleIpc('relay:shell-exec', 'rm -rf /', `${pagesUrl}setup.html`);
    assert.deepEqual([unknown.ok, !unknown.ok && unknown.code], [false, 'UNKNOWN_CHANNEL']);
    assert.equal(app.running, false);
    assert.equal(existsSync(join(userData, 'settings.json')), false, 'nothing was saved');
  });

  it('choosing hub starts the hub in this process, reachable by nodes, and saves the choice in the data dir', async () => {
    const r = await app.handleIpc('relay:setup', { mode: 'hub', lan: true }, `${pagesUrl}setup.html`);
    assert.ok(r.ok, JSON.stringify(r));
    const s = r.value as AppState;
    assert.equal(s.mode, 'hub');
    const m = /^http:\/\/127\.0\.0\.1:(\d+)$/.exec(s.hub!.url); // the dashboard is opened through loopback
    assert.ok(m, s.hub!.url);
    const sock = listeningSockets(process.pid).find((x) => x.port === Number(m[1]));
    assert.ok(sock && /^0+$/.test(sock.addr), `the hub listens on every interface (${JSON.stringify(sock)})`);
    assert.equal(trayIcon(s), 'hub-idle');
    assert.equal(statusLine(s), 'Hub idle · 0 nodes');
    assert.equal(JSON.parse(readFileSync(join(userData, 'settings.json'), 'utf8')).mode, 'hub');
    assert.ok(existsSync(join(userData, 'hub')), "the hub's store lives in the app's data dir");
    const health = await fetch(`${s.hub!.url}/status`);
    assert.equal(health.status, 200);
    // A hub the network can reach answers /v1 only with a key: the app made one and shows it once.
    assert.match(s.hub!.apiKey ?? '', /^relay-[A-Za-z0-9_-]{32}$/);
    assert.equal(s.hub!.apiKeyRequired, true);
    assert.match(s.hub!.v1Url, /^http:\/\/[\d.]+:\d+\/v1$/);
    const store = readFileSync(join(userData, 'hub', 'relay.json'), 'utf8');
    assert.ok(!store.includes(s.hub!.apiKey!), "the store holds the key's hash, not the key");
  });

  it('serving a model turns the tray to "serving" with a status line naming the replica', async () => {
    const url = app.hub!.url;
    await addModel({ url }, { path: fixture('dense'), name: 'small', required_vram_mb: 300 });
    const guest = await completion(url, 'small');
    assert.equal(guest.status, 401, 'no key, no GPUs');
    assert.equal(((await guest.json()) as { error: { code: string } }).error.code, 'invalid_api_key');
    const res = await completion(url, 'small', app.state().hub!.apiKey!);
    assert.equal(res.status, 200, await res.text());
    const s = app.state();
    assert.equal(trayIcon(s), 'hub-serving');
    assert.equal(statusLine(s), 'Hub: replica of small (hub)');
    const menu = buildTrayMenu(s).map((i) => i.label);
    assert.ok(menu.includes('Open dashboard') && menu.includes('Mode: hub (change…)') && menu.includes('Quit relay'));
  });

  it('the dashboard origin may read state but not re-run setup; a look-alike origin may do neither', async () => {
    const url = app.hub!.url;
    const read = await app.handleIpc('relay:get-state', null, `${url}/`);
    assert.ok(read.ok);
    const setup = await app.handleIpc('relay:setup', { mode: 'hub' }, `${url}/`);
    assert.deepEqual([setup.ok, !setup.ok && setup.code], [false, 'FORBIDDEN']);
    const lookAlike = await app.handleIpc('relay:get-state', null, `${url}1/`); // same prefix, another port
    assert.deepEqual([lookAlike.ok, !lookAlike.ok && lookAlike.code], [false, 'FORBIDDEN']);
    const pause = await app.handleIpc('relay:set-paused', true, `${url}/`);
    assert.deepEqual([pause.ok, !pause.ok && pause.code], [false, 'FAILED']); // pausing is for node mode
  });

  it('tray actions: open dashboard, start at login (persisted), quit asks the shell', async () => {
    await app.onTray('open-dashboard');
    assert.deepEqual(shell.windows.at(-1), { url: app.hub!.url });
    // "Add a node…": the dashboard opens on its add-node panel (a fresh token with this hub's address).
    await app.onTray('add-node');
    assert.deepEqual(shell.windows.at(-1), { url: `${app.hub!.url}/#add-node` });
    const made = (await (await fetch(`${app.hub!.url}/api/nodes/token`, { method: 'POST' })).json()) as { token: string; hub_url: string; command: string };
    assert.equal(made.command, `npx relay up --hub ${made.hub_url} --token ${made.token}`);
    assert.equal(tokenHubUrl(made.token), made.hub_url, 'the token carries the address nodes reach this hub at');
    assert.equal(new URL(made.hub_url).port, new URL(app.hub!.url).port);
    await app.onTray('toggle-start-at-login');
    assert.equal(shell.loginItem, true);
    assert.equal(JSON.parse(readFileSync(join(userData, 'settings.json'), 'utf8')).startAtLogin, true);
    assert.equal(buildTrayMenu(app.state()).find((i) => i.label === 'Start at login')?.checked, true);
    await app.onTray('quit');
    assert.equal(shell.quits, 1);
  });

  it('quitting stops the hub and its llama-server; the next start remembers hub mode', async () => {
    const pid = app.hub!.scheduler.view.status().find((r) => r.model === 'small')!.pid!;
    assert.ok(alive(pid));
    await app.stop();
    assert.ok(await waitGone(pid, 15_000), 'llama-server stopped with the app');
    assert.equal(app.running, false);
    const shell2 = new RecordingShell();
    app = new AppController({ userData, shell: shell2, log: quiet(), pagesUrl, defaults: { hubPort: 0 } });
    await app.start();
    assert.deepEqual(shell2.windows, [], 'no setup page the second time');
    assert.equal(app.state().mode, 'hub');
    assert.equal(app.state().startAtLogin, true);
    const models = (await (await fetch(`${app.hub!.url}/api/models`)).json()) as { models: { name: string }[] };
    assert.deepEqual(
      models.models.map((m) => m.name),
      ['small'],
      'the registry survived the restart',
    );
  });

  it('a damaged settings file starts from its last good copy; with none, as a first run that says so, leaving the file alone', async () => {
    await app.stop();
    writeFileSync(join(userData, 'settings.json'), '{"mode": "hub",'); // torn by a crash
    assert.ok(existsSync(join(userData, 'settings.json.bak')), 'every save keeps the previous file');
    const shell2b = new RecordingShell();
    app = new AppController({ userData, shell: shell2b, log: quiet(), pagesUrl, defaults: { hubPort: 0 } });
    await app.start();
    assert.equal(app.state().mode, 'hub', 'the last good copy');
    await app.stop();
    rmSync(join(userData, 'settings.json.bak'));
    const shell3 = new RecordingShell();
    app = new AppController({ userData, shell: shell3, log: quiet(), pagesUrl, defaults: { hubPort: 0 } });
    await app.start();
    assert.deepEqual(shell3.windows, [{ page: 'setup' }]);
    assert.match(statusLine(shell3.last!), /^Error: settings\.json is unreadable/);
    assert.equal(readFileSync(join(userData, 'settings.json'), 'utf8'), '{"mode": "hub",');
  });
});

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
    const s = (await hub.status()) as unknown as { nodes: { name: string; state: string; connected: boolean }[] };
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

describe('tray app process: children end when it quits and when it crashes', { timeout: 180_000 }, () => {
  const host = new URL('../helpers/app-host.js', import.meta.url).pathname;

  after(killAllJsonLineProcesses);

  async function runApp(userData: string) {
    const app = startJsonLineProcess([host, userData, pagesUrl], { ...process.env, RELAY_TEST_CPU_BUDGET_MB: '800' });
    await app.wait((l) => l.started === true, 60_000);
    const url = [...app.lines].reverse().find((l) => typeof l.hub === 'string')!.hub as string;
    await addModel({ url }, { path: fixture('dense'), name: 'small', required_vram_mb: 300 });
    const res = await completion(url, 'small');
    assert.equal(res.status, 200, await res.text());
    const status = (await (await fetch(`${url}/status`)).json()) as { replicas: { pid: number }[] };
    return { proc: app.proc, exited: app.exited, pid: status.replicas[0]!.pid };
  }

  for (const [how, signal] of [
    ['quits (SIGTERM → stop)', 'SIGTERM'],
    ['crashes (SIGKILL)', 'SIGKILL'],
  ] as const) {
    it(`its llama-server ends when the app ${how}`, async () => {
      const userData = mkdtempSync(join(tmpdir(), 'relay-app-proc-'));
      writeFileSync(join(userData, 'settings.json'), JSON.stringify({ mode: 'hub', hubPort: 0 }));
      const { proc, exited, pid } = await runApp(userData);
      assert.ok(alive(pid));
      proc.kill(signal);
      await exited;
      assert.ok(await waitGone(pid, 15_000), `llama-server ${pid} outlived the app`);
    });
  }
});
