import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { IPC_CHANNELS, STATE_EVENT, validateIpc, type AppState, type NodeView } from '../../src/shared/ipc.js';
import { buildTrayMenu, statusLine, trayIcon } from '../../src/main/app/tray-menu.js';

const node = (o: Partial<NodeView> = {}): NodeView => ({
  name: 'kitchen',
  hub: 'http://hub:7070',
  connected: true,
  availability: 'idle',
  reason: null,
  paused: false,
  schedule: '',
  outsideSchedule: false,
  replicas: [],
  stages: [],
  ...o,
});
const nodeState = (o: Partial<NodeView> = {}): AppState => ({ mode: 'node', hub: null, node: node(o), startAtLogin: false, error: null });
const hubState = (replicas: { model: string; where: string }[] = [], shards: { model: string; stages: number }[] = [], paused = false): AppState => ({
  mode: 'hub',
  hub: {
    url: 'http://127.0.0.1:7070',
    serving: true,
    replicas,
    shards,
    nodes: 2,
    paused,
    availability: paused ? 'paused' : 'idle',
    reason: paused ? 'paused by the owner' : null,
    v1Url: 'http://192.168.1.20:7070/v1',
    apiKeyRequired: true,
    apiKey: null,
  },
  node: null,
  startAtLogin: true,
  error: null,
});

describe('tray', () => {
  it('the icon reflects the state', () => {
    assert.equal(trayIcon({ mode: null, hub: null, node: null, startAtLogin: false, error: null }), 'setup');
    assert.equal(trayIcon(hubState()), 'hub-idle');
    assert.equal(trayIcon(hubState([{ model: 'qwen', where: 'hub' }])), 'hub-serving');
    assert.equal(trayIcon(nodeState()), 'node-idle');
    assert.equal(trayIcon(nodeState({ availability: 'busy' })), 'node-busy');
    assert.equal(trayIcon(nodeState({ paused: true, availability: 'paused' })), 'node-paused');
    assert.equal(trayIcon(nodeState({ outsideSchedule: true, availability: 'paused' })), 'node-outside-schedule');
    assert.equal(trayIcon(nodeState({ connected: false })), 'node-offline');
  });

  it('the status line says what runs here now', () => {
    assert.equal(statusLine(nodeState({ replicas: [{ replica: 'r1', model: 'qwen3' }] })), 'Running: replica of qwen3');
    assert.equal(statusLine(nodeState({ stages: [{ model: 'qwen3-32b', index: 0, of: 2 }] })), 'Running: shard stage 1 of 2 of qwen3-32b');
    assert.equal(statusLine(nodeState({ connected: false })), 'Offline: cannot reach http://hub:7070');
    assert.equal(statusLine(hubState([], [{ model: 'big', stages: 3 }])), 'Hub: shard of big (3 stages)');
    assert.equal(statusLine(hubState()), 'Hub idle · 2 nodes');
  });

  it("a node's menu: status, pause toggle reflecting the state, schedule, dashboard, mode, login, quit", () => {
    const m = buildTrayMenu(nodeState({ paused: true, schedule: 'mon-fri 09:00-17:30' }));
    assert.deepEqual(
      m.map((i) => i.label ?? '—'),
      ['Sharing paused', '—', 'Pause sharing', 'Schedule: paused mon-fri 09:00-17:30', 'Open dashboard', 'Settings…', 'Mode: node (change…)', 'Start at login', '—', 'Quit relay'],
    );
    const pause = m.find((i) => i.action === 'toggle-pause')!;
    assert.deepEqual([pause.type, pause.checked], ['checkbox', true]);
    assert.equal(m[0]!.enabled, false);
  });

  it("a hub's menu pauses the hub's own GPUs (nodes keep serving); an unset app offers setup first", () => {
    const m = buildTrayMenu(hubState());
    const pause = m.find((i) => i.action === 'toggle-pause')!;
    assert.deepEqual([pause.label, pause.type, pause.checked], ["Pause this machine's GPUs (nodes keep serving)", 'checkbox', false]);
    const paused = hubState([], [], true);
    assert.equal(buildTrayMenu(paused).find((i) => i.action === 'toggle-pause')!.checked, true);
    assert.equal(statusLine(paused), "Hub idle · 2 nodes · this machine's GPUs paused (paused by the owner)");
    assert.equal(m.find((i) => i.action === 'toggle-start-at-login')!.checked, true);
    const fresh = buildTrayMenu({ mode: null, hub: null, node: null, startAtLogin: false, error: null });
    assert.equal(fresh.find((i) => i.action === 'open-setup')!.label, 'Set up: hub or node…');
    assert.equal(
      fresh.some((i) => i.action === 'open-dashboard'),
      false,
    );
    assert.equal(m.find((i) => i.action === 'add-node')?.label, 'Add a node…', 'a hub adds nodes from its tray');
    assert.equal(
      fresh.some((i) => i.action === 'add-node'),
      false,
    );
    assert.equal(m.find((i) => i.action === 'open-settings')?.label, 'Settings…');
    assert.equal(
      fresh.some((i) => i.action === 'open-settings'),
      false,
      'nothing to set before setup',
    );
  });
});

describe('IPC contract', () => {
  it('accepts exactly the documented payloads', () => {
    assert.equal(validateIpc('relay:get-state', null), true);
    assert.equal(validateIpc('relay:get-state', { sneaky: 1 }), false);
    assert.equal(validateIpc('relay:set-paused', true), true);
    assert.equal(validateIpc('relay:set-paused', 'yes'), false);
    assert.equal(validateIpc('relay:setup', { mode: 'hub' }), true);
    assert.equal(validateIpc('relay:setup', { mode: 'hub', lan: false }), true);
    assert.equal(validateIpc('relay:setup', { mode: 'hub', lan: 'yes' }), false);
    assert.equal(validateIpc('relay:setup', { mode: 'node', hubUrl: 'http://hub:7070', token: 'rly1.x.y', name: 'kitchen' }), true);
    assert.equal(validateIpc('relay:setup', { mode: 'node', hubUrl: 'file:///etc/passwd', token: 't' }), false);
    assert.equal(validateIpc('relay:setup', { mode: 'node', hubUrl: 'http://hub', token: '' }), false);
    assert.equal(validateIpc('relay:setup', { mode: 'node', hubUrl: 'http://hub', token: 't', name: '../x' }), false);
    assert.equal(validateIpc('relay:setup', { mode: 'root' }), false);
    assert.equal(validateIpc('relay:nope' as never, null), false);
    // The settings page: only known fields, each of its type and range (the schedule's syntax is the parser's).
    assert.equal(validateIpc('relay:get-settings', null), true);
    assert.equal(validateIpc('relay:save-settings', { schedule: 'mon-fri 09:00-17:30', autoPause: true, cpuBudgetMb: 0, cacheBudgetMb: 'auto', startAtLogin: false, lan: true }), true);
    assert.equal(validateIpc('relay:save-settings', { cacheBudgetMb: 2048 }), true);
    assert.equal(validateIpc('relay:save-settings', {}), true);
    assert.equal(validateIpc('relay:save-settings', { hubUrl: 'http://evil' }), false);
    assert.equal(validateIpc('relay:save-settings', { cpuBudgetMb: -1 }), false);
    assert.equal(validateIpc('relay:save-settings', { cpuBudgetMb: 1.5 }), false);
    assert.equal(validateIpc('relay:save-settings', { cacheBudgetMb: 'lots' }), false);
    assert.equal(validateIpc('relay:save-settings', { schedule: 'x'.repeat(1001) }), false);
    assert.equal(validateIpc('relay:save-settings', { lan: 'yes' }), false);
    assert.equal(validateIpc('relay:save-settings', null), false);
    assert.equal(validateIpc('relay:save-settings', [1]), false);
  });
});

describe('preload', () => {
  // The compiled preload, run with a recording stand-in for the two electron objects it may touch: what
  // it exposes must be exactly the contract's calls, and nothing that reaches ipcRenderer itself.
  it('exposes exactly the IPC contract through contextBridge, nothing more', async () => {
    const code = readFileSync(new URL('../../src/main/electron/preload.cjs', import.meta.url), 'utf8');
    const exposed: Record<string, Record<string, (...a: unknown[]) => unknown>> = {};
    const invoked: string[] = [];
    const subscribed: string[] = [];
    const electron = {
      contextBridge: { exposeInMainWorld: (k: string, v: Record<string, (...a: unknown[]) => unknown>) => (exposed[k] = v) },
      ipcRenderer: {
        invoke: async (ch: string) => void invoked.push(ch),
        on: (ch: string) => void subscribed.push(ch),
      },
    };
    const module = { exports: {} };
    runInNewContext(code, { require: (m: string) => (m === 'electron' ? electron : assert.fail(`preload requires ${m}`)), module, exports: module.exports });
    assert.deepEqual(Object.keys(exposed), ['relay']);
    const api = exposed.relay!;
    assert.deepEqual(Object.keys(api).sort(), ['getSettings', 'getState', 'onState', 'openDashboard', 'saveSettings', 'setPaused', 'setup']);
    for (const [k, f] of Object.entries(api)) {
      assert.equal(typeof f, 'function', k);
      await f(k === 'onState' ? () => undefined : null);
    }
    assert.deepEqual([...invoked].sort(), [...IPC_CHANNELS].sort());
    assert.deepEqual(subscribed, [STATE_EVENT]);
  });

  it('the window is isolated: contextIsolation on, nodeIntegration off, sandboxed', () => {
    const main = readFileSync(new URL('../../../src/main/electron/main.ts', import.meta.url), 'utf8');
    assert.match(main, /webPreferences: \{[^}]*contextIsolation: true, nodeIntegration: false, sandbox: true/);
  });
});
