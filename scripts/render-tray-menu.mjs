#!/usr/bin/env node
// Renders the tray menu model (dist/src/main/app/tray-menu.js) for a few states into docs/tray-menu.png,
// in Debian's chromium: a picture of what the menu says, drawn as a plain list (not the OS's own menu).
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { buildTrayMenu, trayIcon } from '../dist/src/main/app/tray-menu.js';

const node = {
  name: 'kitchen',
  hub: 'http://desktop:7070',
  connected: true,
  availability: 'busy',
  reason: null,
  paused: false,
  schedule: 'mon-fri 09:00-17:30',
  outsideSchedule: false,
  replicas: [{ replica: 'r1', model: 'qwen3-8b' }],
  stages: [],
};
const states = [
  ['node, serving', { mode: 'node', hub: null, node, startAtLogin: true, error: null }],
  ['node, paused', { mode: 'node', hub: null, node: { ...node, paused: true, availability: 'paused', replicas: [] }, startAtLogin: true, error: null }],
  ['hub', { mode: 'hub', node: null, hub: { url: 'http://127.0.0.1:7070', serving: true, replicas: [], shards: [{ model: 'qwen3-32b', stages: 2 }], nodes: 2 }, startAtLogin: false, error: null }],
];
const icon = (name) => `data:image/png;base64,${readFileSync(new URL(`../assets/tray-${name}.png`, import.meta.url)).toString('base64')}`;
const menu = (items) =>
  items.map((i) => (i.type === 'separator' ? '<hr>' : `<div class="item${i.enabled === false ? ' off' : ''}">${i.type === 'checkbox' ? (i.checked ? '☑ ' : '☐ ') : ''}${i.label}</div>`)).join('');
const html = `<html><body style="font:13px system-ui;background:#e5e7eb;display:flex;gap:24px;padding:16px">
<style>.m{background:#fff;border:1px solid #9ca3af;border-radius:6px;padding:4px 0;width:300px;box-shadow:0 4px 12px #0003}
.item{padding:4px 14px}.off{color:#6b7280}hr{border:0;border-top:1px solid #e5e7eb;margin:4px 0}h3{font-size:12px;margin:0 0 6px;display:flex;gap:6px;align-items:center}</style>
${states.map(([t, s]) => `<div><h3><img src="${icon(trayIcon(s))}" width="16" height="16">${t} — icon ${trayIcon(s)}</h3><div class="m">${menu(buildTrayMenu(s))}</div></div>`).join('')}
</body></html>`;
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
const page = await browser.newPage({ viewport: { width: 1010, height: 330 } });
await page.setContent(html);
await page.screenshot({ path: new URL('../docs/tray-menu.png', import.meta.url).pathname });
await browser.close();
console.log('wrote docs/tray-menu.png');
