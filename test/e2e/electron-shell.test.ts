import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { addModel } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { alive, killAllJsonLineProcesses, startJsonLineProcess, waitGone, type JsonLineProcess } from '../helpers/proc.js';

/**
 * relay's Electron shell (dist/src/main/electron/main.js, unchanged) on a stand-in for Electron's API
 * (test/helpers/electron-standin): Electron's binary cannot be installed on these machines, so this checks
 * relay's wiring — single-instance lock, tray icon files and menu clicks, the window's isolation, ipcMain →
 * controller, quit stopping the children — with the real embedded hub and llama-server. It says nothing
 * about Electron itself.
 */
const repo = new URL('../../../', import.meta.url).pathname;
const main = join(repo, 'dist', 'src', 'main', 'electron', 'main.js');
const register = new URL('../helpers/electron-standin/register.js', import.meta.url).pathname;
const pagesUrl = `${pathToFileURL(join(repo, 'src', 'renderer')).href}/`;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_CPU_BUDGET_MB: '800', RELAY_LOG_LEVEL: 'info' };

after(killAllJsonLineProcesses);

const launch = (userData: string, env: Record<string, string> = {}): JsonLineProcess =>
  startJsonLineProcess(['--import', register, main], { ...process.env, ...ENV, STANDIN_USERDATA: userData, ...env });

describe("the Electron shell on a stand-in for Electron's API", { timeout: 180_000 }, () => {
  it('a second instance quits at once, before any tray or window', async () => {
    const s = launch(mkdtempSync(join(tmpdir(), 'relay-shell-')), { STANDIN_LOCK: 'taken' });
    s.send({}); // keep stdin open until it exits
    assert.equal(await s.exited, 0);
    assert.deepEqual(
      s.lines.filter((l) => 'lock' in l || 'quit' in l),
      [{ lock: false }, { quit: true }],
    );
    assert.ok(!s.lines.some((l) => 'tray' in l || 'window' in l));
  });

  it('a first run opens the setup page in an isolated window', async () => {
    const s = launch(mkdtempSync(join(tmpdir(), 'relay-shell-')));
    const load = await s.wait<{ loadFile: string; exists: boolean }>((l) => 'loadFile' in l);
    assert.ok(load.loadFile.endsWith(join('src', 'renderer', 'setup.html')) && load.exists, JSON.stringify(load));
    const win = await s.wait<{ window: { webPreferences: Record<string, unknown> } }>((l) => 'window' in l);
    assert.deepEqual({ ...win.window.webPreferences, preload: undefined }, { preload: undefined, contextIsolation: true, nodeIntegration: false, sandbox: true });
    const tray = await s.wait<{ trayImage: { path: string; exists: boolean } }>((l) => 'trayImage' in l);
    assert.ok(tray.trayImage.path.endsWith('tray-setup.png') && tray.trayImage.exists);
    s.send({ quit: true });
    assert.equal(await s.exited, 0);
  });

  it('hub mode: tray and menu follow the hub, IPC goes through the controller, Quit stops llama-server', async () => {
    const userData = mkdtempSync(join(tmpdir(), 'relay-shell-'));
    writeFileSync(join(userData, 'settings.json'), JSON.stringify({ mode: 'hub', hubPort: 0, hubListen: '127.0.0.1', cpuBudgetMb: 800 }));
    const s = launch(userData);
    // "Hub starting…" first (the hub-idle icon already), then the running hub's line.
    await s.wait((l) => Array.isArray(l.menu) && (l.menu as { label?: string }[])[0]?.label === 'Hub idle · 0 nodes');
    assert.ok(s.lines.some((l) => (l.trayImage as { path?: string; exists?: boolean } | undefined)?.path?.endsWith('tray-hub-idle.png') && (l.trayImage as { exists: boolean }).exists));
    // IPC: the app's own page may read the state; another origin may not.
    s.send({ ipc: 'relay:get-state', payload: null, sender: `${pagesUrl}setup.html` });
    const ok = await s.wait<{ ipcResult: { ok: true; value: { hub: { url: string } } } }>((l) => 'ipcResult' in l);
    assert.equal(ok.ipcResult.ok, true);
    const url = ok.ipcResult.value.hub.url;
    s.send({ ipc: 'relay:get-state', payload: null, sender: 'https://evil.example/' });
    await s.wait((l) => (l.ipcResult as { code?: string } | undefined)?.code === 'FORBIDDEN');
    // "Open dashboard" in the menu loads the hub's page.
    s.send({ click: 'Open dashboard' });
    await s.wait((l) => l.loadURL === url);
    // The window goes nowhere but the dashboard's origin and the app's own pages; new windows go to the
    // user's browser, http(s) only.
    for (const [to, prevented] of [
      [`${url}/status`, false],
      ['https://evil.example/', true],
      [`${pagesUrl}setup.html`, false],
      ['file:///etc/passwd', true],
    ] as const) {
      s.send({ navigate: to });
      const r = await s.wait((l) => l.navigated === to);
      assert.deepEqual([r.prevented, r.handled], [prevented, true], to);
    }
    for (const [to, external] of [
      ['https://github.com/ggml-org/llama.cpp', true],
      ['file:///etc/passwd', false],
      ['javascript:alert(1)', false],
    ] as const) {
      s.send({ windowOpen: to });
      const r = await s.wait((l) => l.windowOpen === to);
      assert.equal(r.action, 'deny');
      if (external) await s.wait((l) => l.openExternal === to);
      else assert.ok(!s.lines.some((l) => l.openExternal === to), `${to} never reaches the browser`);
    }
    // A request places a replica; the tray turns to "serving" on its next refresh.
    await addModel({ url }, { path: fixture('dense'), name: 'small', required_vram_mb: 300 });
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'small', prompt: 'hi', max_tokens: 2 }) });
    assert.equal(res.status, 200, await res.text());
    const pid = ((await (await fetch(`${url}/status`)).json()) as { replicas: { pid: number }[] }).replicas[0]!.pid;
    await s.wait((l) => (l.trayImage as { path?: string } | undefined)?.path?.endsWith('tray-hub-serving.png') === true, 15_000);
    await s.wait((l) => Array.isArray(l.menu) && (l.menu as { label?: string }[])[0]?.label === 'Hub: replica of small (hub)');
    assert.ok(alive(pid));
    s.send({ click: 'Quit relay' });
    assert.equal(await s.exited, 0);
    assert.deepEqual(
      s.lines.filter((l) => 'beforeQuit' in l).map((l) => l.beforeQuit),
      [{ prevented: true }, { prevented: false }],
      'quit waits for the hub to stop, then quits',
    );
    assert.ok(await waitGone(pid, 15_000), 'llama-server stopped with the app');
    // No terminal in a tray app: the log is a file in its data dir.
    const log = readFileSync(join(userData, 'logs', 'relay.log'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { msg: string; name: string });
    assert.ok(log.length > 0 && log.every((l) => l.name === 'tray'));
    assert.ok(
      log.some((l) => /replica ready|started|stopping/i.test(l.msg)),
      log.map((l) => l.msg).join('\n'),
    );
  });
});
