import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { AppState } from '../../src/shared/ipc.js';
import { AppController } from '../../src/main/app/controller.js';
import { buildTrayMenu, statusLine, trayIcon } from '../../src/main/app/tray-menu.js';
import { addModel } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { listeningSockets } from '../helpers/node.js';
import { alive, killAllJsonLineProcesses, startJsonLineProcess, waitGone } from '../helpers/proc.js';
import { tokenHubUrl } from '../../src/main/core/pairing/tokens.js';
import { packageVersion } from '../../src/main/core/app-files.js';
import { completion, pagesUrl, quiet, RecordingShell, TRAY_ENV as ENV } from '../helpers/tray.js';

/**
 * The tray app without Electron's binary (it cannot be downloaded on these machines): the same controller
 * src/main/electron/main.ts runs, with the real embedded hub, the real node agent and real llama.cpp
 * processes; the shell (tray, window, login item) is a recorder. The setup page runs in Debian's chromium,
 * with the preload's `window.relay` bridge reproduced by playwright's exposeFunction → controller.handleIpc,
 * the sender being the page's own URL, as Electron's senderFrame.url would be.
 */
Object.assign(process.env, ENV); // the embedded hub and agent read these, as the app's own process would

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
    const made = (await (await fetch(`${app.hub!.url}/api/nodes/token`, { method: 'POST' })).json()) as { token: string; hub_url: string; commands: { os: string; command: string }[] };
    assert.deepEqual(
      made.commands.map((c) => [c.os, c.command]),
      [
        ['linux', `./relay up --token ${made.token}`],
        ['windows', `.\\relay.exe up --token ${made.token}`],
        ['npm', `npx relay-llm@${packageVersion()} up --token ${made.token}`],
      ],
    );
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
    assert.equal(readFileSync(join(userData, 'settings.json.unreadable'), 'utf8'), '{"mode": "hub",', 'the torn file is set aside, the good copy kept');
    await app.stop();
    rmSync(join(userData, 'settings.json.bak'));
    writeFileSync(join(userData, 'settings.json'), '{"mode": "hub",'); // torn again, and no copy this time
    const shell3 = new RecordingShell();
    app = new AppController({ userData, shell: shell3, log: quiet(), pagesUrl, defaults: { hubPort: 0 } });
    await app.start();
    assert.deepEqual(shell3.windows, [{ page: 'setup' }]);
    assert.match(statusLine(shell3.last!), /^Error: settings\.json is unreadable/);
    assert.equal(readFileSync(join(userData, 'settings.json'), 'utf8'), '{"mode": "hub",');
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
