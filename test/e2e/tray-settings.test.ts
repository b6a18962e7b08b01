import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { artifacts, pagesUrl, quiet, RecordingShell, TRAY_ENV as ENV } from '../helpers/tray.js';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { SettingsView } from '../../src/shared/ipc.js';
import { AppController } from '../../src/main/app/controller.js';
import { buildTrayMenu, trayIcon } from '../../src/main/app/tray-menu.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { listeningSockets, mintToken } from '../helpers/node.js';
import { until } from '../helpers/proc.js';
import fc from 'fast-check';
import { inPauseWindow, parseSchedule } from '../../src/main/core/availability.js';
import { scheduleWindows } from '../../src/main/app/app-settings.js';

/**
 * The tray app's settings page (src/renderer/settings.html) in Debian's chromium, bridged to the real
 * controller as in tray-app.test.ts: the weekly schedule, auto-pause, CPU and cache budgets, start at login,
 * LAN exposure and the /v1 URL, applied without restarting the app and kept across one.
 */
Object.assign(process.env, ENV);
const settingsPage = `${pagesUrl}settings.html`;

/** The settings page with the preload's window.relay reproduced: each call goes to controller.handleIpc as the page. */
async function openSettings(browser: Browser, app: () => AppController): Promise<Page> {
  const page = await browser.newPage();
  await page.exposeFunction('__relayInvoke', (channel: string, payload: unknown) => app().handleIpc(channel, payload, page.url()));
  await page.addInitScript(() => {
    const call = (c: string, p: unknown = null) => (globalThis as unknown as { __relayInvoke: (c: string, p: unknown) => Promise<unknown> }).__relayInvoke(c, p);
    (globalThis as unknown as { relay: unknown }).relay = {
      getState: () => call('relay:get-state'),
      getSettings: () => call('relay:get-settings'),
      saveSettings: (c: unknown) => call('relay:save-settings', c),
      openDashboard: () => call('relay:open-dashboard'),
      onState: () => undefined,
    };
  });
  await page.goto(settingsPage);
  await page.getByLabel(/CPU budget/).waitFor();
  return page;
}

async function save(page: Page): Promise<void> {
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').getByText('Saved').waitFor({ timeout: 60_000 });
}

describe('tray settings page, node mode', { timeout: 240_000 }, () => {
  const userData = mkdtempSync(join(tmpdir(), 'relay-settings-node-'));
  let hub: HubProcess;
  let app: AppController;
  let browser: Browser;

  before(async () => {
    hub = await startHub({ env: ENV });
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    });
    app = new AppController({ userData, shell: new RecordingShell(), log: quiet(), pagesUrl, defaults: { hubPort: 0, cpuBudgetMb: 1000 }, heartbeatMs: 300 });
    await app.start();
    const r = await app.handleIpc('relay:setup', { mode: 'node', hubUrl: hub.url, token: await mintToken(hub), name: 'den' }, `${pagesUrl}setup.html`);
    assert.ok(r.ok, JSON.stringify(r));
    await until(
      () => app.state(),
      (s) => s.node?.connected === true,
      20_000,
    );
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
    await hub?.stop();
  });

  const hubNode = async () => (await hub.status()).nodes.find((n) => n.name === 'den')!;

  it("the tray opens it; the page shows the node's settings and the hub's /v1 URL", async () => {
    const shell = new RecordingShell();
    const menu = buildTrayMenu(app.state());
    assert.ok(menu.some((i) => i.label === 'Settings…' && i.action === 'open-settings'));
    const other = new AppController({ userData: mkdtempSync(join(tmpdir(), 'relay-settings-x-')), shell, log: quiet(), pagesUrl });
    await other.onTray('open-settings');
    assert.deepEqual(shell.windows, [{ page: 'setup' }], 'before setup, "Settings…" is the setup page');
    const v = (await app.handleIpc('relay:get-settings', null, settingsPage)) as { ok: true; value: SettingsView };
    assert.deepEqual(
      { ...v.value, autoPauseUnavailable: null },
      {
        mode: 'node',
        schedule: '',
        windows: [],
        autoPause: false,
        autoPauseUnavailable: null,
        cpuBudgetMb: 1000,
        cacheBudgetMb: 'auto',
        startAtLogin: false,
        lan: null,
        v1Url: `${hub.url}/v1`,
      },
    );
  });

  it("the page's schedule rules are the node's: its text parses back to its windows, its week view pauses what availability.ts pauses", async () => {
    // The sandboxed page cannot import availability.ts, so it has its own copy of the rule: held to it here.
    const hhmm = fc.tuple(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 15, 30, 45)).map(([h, m]) => `${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`);
    const windows = fc.sample(
      fc.array(
        fc.record({
          days: fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 7 }),
          from: hhmm,
          to: fc.oneof(hhmm, fc.constant('24:00')),
        }),
        { minLength: 1, maxLength: 3 },
      ),
      { numRuns: 150, seed: 15 },
    );
    const page = await openSettings(browser, () => app);
    try {
      const seen = await page.evaluate((all) => {
        const g = globalThis as unknown as { scheduleText(w: unknown): string; pausedAt(w: unknown, day: number, hour: number): boolean };
        return all.map((w) => ({ text: g.scheduleText(w), week: [0, 1, 2, 3, 4, 5, 6].map((d) => Array.from({ length: 24 }, (_, h) => g.pausedAt(w, d, h))) }));
      }, windows);
      seen.forEach((page, i) => {
        const sorted = (ws: readonly { days: readonly number[]; from: string; to: string }[]) => ws.map((w) => ({ ...w, days: [...w.days].sort() }));
        assert.deepEqual(sorted(scheduleWindows(page.text)), sorted(windows[i]!), `"${page.text}" reads back as the windows it came from`);
        const parsed = parseSchedule(page.text);
        // 2026-11-29 is a Sunday: day d at hour h is that Sunday + d days, at h:30 (the page draws mid-hour).
        const node = [0, 1, 2, 3, 4, 5, 6].map((d) => Array.from({ length: 24 }, (_, h) => inPauseWindow(parsed, new Date(2026, 10, 29 + d, h, 30))));
        assert.deepEqual(page.week, node, `the week view of "${page.text}"`);
      });
    } finally {
      await page.close();
    }
  });

  it('a weekly window that covers now pauses the node at once; the hub follows; the window removed, it shares again', async () => {
    const page = await openSettings(browser, () => app);
    assert.equal(await page.locator('#v1-url').textContent(), `${hub.url}/v1`);
    await page.getByRole('button', { name: 'Add a pause window' }).click();
    const row = page.locator('.window').first();
    for (const d of ['Sun', 'Sat']) await row.getByLabel(d).check(); // Mon-Fri are ticked for a new window
    await row.getByLabel('paused from').fill('00:00');
    await row.getByLabel('paused until').fill('24:00');
    assert.equal(await page.locator('#schedule-text').textContent(), 'mon-sun 00:00-24:00');
    await save(page);
    assert.equal(app.agent!.availability().reason, 'outside the sharing schedule', 'paused now, without a restart');
    const paused = await until(hubNode, (n) => n.state === 'paused', 20_000);
    assert.equal(paused.reason, 'outside the sharing schedule');
    assert.equal(trayIcon(app.state()), 'node-outside-schedule');
    assert.equal(await page.locator('#week .h.off').count(), 7 * 24, 'the week view is all paused');

    // A schedule the parser refuses (from the page, or straight over IPC) changes nothing.
    await row.getByLabel('paused until').fill('25:00');
    await page.getByRole('button', { name: 'Save' }).click();
    await page
      .getByRole('alert')
      .getByText(/bad time "25:00"/)
      .waitFor({ timeout: 10_000 });
    const bad = await app.handleIpc('relay:save-settings', { schedule: 'someday 09:00-10:00' }, settingsPage);
    assert.deepEqual([bad.ok, !bad.ok && bad.code], [false, 'INVALID_ARGUMENT']);
    assert.equal(JSON.parse(readFileSync(join(userData, 'node', 'node.json'), 'utf8')).schedule, 'mon-sun 00:00-24:00');

    await page.locator('.window').first().getByRole('button', { name: 'Remove' }).click();
    await save(page);
    await until(hubNode, (n) => n.state === 'idle', 20_000);
    assert.equal(trayIcon(app.state()), 'node-idle');
    // For docs/settings.png: the page as an owner would leave it, work hours kept (not saved here).
    await page.getByRole('button', { name: 'Add a pause window' }).click();
    assert.equal(await page.locator('#schedule-text').textContent(), 'mon-fri 09:00-17:30');
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: join(artifacts, 'settings.png'), fullPage: true });
    await page.close();
  });

  it('CPU and cache budgets apply now (the hub sees the new CPU device), are kept in node.json and survive a restart', async () => {
    const page = await openSettings(browser, () => app);
    await page.getByLabel(/CPU budget/).fill('600');
    await page.getByLabel(/half of the free disk/).uncheck();
    await page.getByLabel(/Model cache budget/).fill('2048');
    await page.getByLabel(/Start relay at login/).check();
    await save(page);
    await page.close();
    const cpu = (await until(hubNode, (n) => n.devices.find((d) => d.id === 'CPU')?.total_mb === 600, 20_000)).devices.find((d) => d.id === 'CPU');
    assert.equal(cpu?.total_mb, 600);
    assert.equal(app.agent!.cache.budget, 2048 * 1024 * 1024);
    const saved = JSON.parse(readFileSync(join(userData, 'node', 'node.json'), 'utf8')) as { cpuBudgetMb: number; cacheBudgetMb: number };
    assert.deepEqual([saved.cpuBudgetMb, saved.cacheBudgetMb], [600, 2048]);
    assert.equal(JSON.parse(readFileSync(join(userData, 'settings.json'), 'utf8')).startAtLogin, true);

    // Only the app's own pages may change settings: the dashboard's origin (a hub on another machine) may not.
    const fromDashboard = await app.handleIpc('relay:save-settings', { cpuBudgetMb: 99999 }, `${hub.url}/`);
    assert.deepEqual([fromDashboard.ok, !fromDashboard.ok && fromDashboard.code], [false, 'FORBIDDEN']);
    const outOfRange = await app.handleIpc('relay:save-settings', { cpuBudgetMb: -1 }, settingsPage);
    assert.deepEqual([outOfRange.ok, !outOfRange.ok && outOfRange.code], [false, 'INVALID_ARGUMENT']);

    await app.stop();
    app = new AppController({ userData, shell: new RecordingShell(), log: quiet(), pagesUrl, heartbeatMs: 300 });
    await app.start();
    const v = (await app.handleIpc('relay:get-settings', null, settingsPage)) as { ok: true; value: SettingsView };
    assert.deepEqual([v.value.cpuBudgetMb, v.value.cacheBudgetMb, v.value.startAtLogin], [600, 2048, true]);
    await until(hubNode, (n) => n.state === 'idle' && n.devices.find((d) => d.id === 'CPU')?.total_mb === 600, 20_000);
  });
});

describe('tray settings page, hub mode', { timeout: 180_000 }, () => {
  const userData = mkdtempSync(join(tmpdir(), 'relay-settings-hub-'));
  const shell = new RecordingShell();
  let app: AppController;
  let browser: Browser;

  before(async () => {
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    });
    app = new AppController({ userData, shell, log: quiet(), pagesUrl, defaults: { hubPort: 0, cpuBudgetMb: 800 } });
    await app.start();
    const r = await app.handleIpc('relay:setup', { mode: 'hub', lan: false }, `${pagesUrl}setup.html`);
    assert.ok(r.ok, JSON.stringify(r));
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
  });

  const status = async () =>
    (await (await fetch(`${app.hub!.url}/status`)).json()) as {
      hub: { availability: string; reason: string | null; schedule: string };
      settings: { cpu_budget_mb: number };
      devices: { id: string; total_mb: number }[];
    };

  it("the hub's schedule and CPU budget apply at once; the LAN switch moves the hub to every interface on the same port", async () => {
    const page = await openSettings(browser, () => app);
    assert.match((await page.locator('#mode').textContent()) ?? '', /This machine is the hub/);
    assert.equal(await page.getByLabel(/Other machines on this network/).isChecked(), false);
    await page.getByRole('button', { name: 'Add a pause window' }).click();
    const row = page.locator('.window').first();
    for (const d of ['Sun', 'Sat']) await row.getByLabel(d).check();
    await row.getByLabel('paused from').fill('00:00');
    await row.getByLabel('paused until').fill('24:00');
    await page.getByLabel(/CPU budget/).fill('500');
    await save(page);
    const s = await status();
    assert.deepEqual([s.hub.availability, s.hub.reason, s.hub.schedule], ['paused', 'outside the sharing schedule', 'mon-sun 00:00-24:00']);
    assert.equal(s.settings.cpu_budget_mb, 500);
    const cpu = s.devices.find((d) => d.id === 'CPU');
    assert.equal(cpu?.total_mb, 500, "the hub's CPU device follows the budget");

    const port = app.hub!.port;
    await page.getByLabel(/Other machines on this network/).check();
    await save(page);
    assert.equal(app.hub!.port, port, 'the same port: nodes that joined at it come back');
    const sock = listeningSockets(process.pid).find((x) => x.port === port);
    assert.ok(sock && /^0+$/.test(sock.addr), `the hub listens on every interface now (${JSON.stringify(sock)})`);
    assert.match((await page.locator('#v1-url').textContent()) ?? '', new RegExp(`^http://[\\d.]+:${port}/v1$`));
    assert.match(app.state().hub!.apiKey ?? '', /^relay-/, 'a hub the network reaches gets its first API key, shown in the tray');
    // The schedule lives in the hub's store: it survived the hub's restart.
    assert.equal((await status()).hub.schedule, 'mon-sun 00:00-24:00');
    await page.close();
  });
});
