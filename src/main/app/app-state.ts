import type { AppState, SettingsView } from '../../shared/ipc.js';
import type { Hub } from '../core/hub/index.js';
import { beyondLoopback } from '../core/hub/http/guard.js';
import { autoPauseSupport } from '../core/gpu/nvml.js';
import { inPauseWindow, parseSchedule } from '../core/availability.js';
import type { NodeAgent } from '../core/node/agent.js';
import { readSettings, type NodeSettings } from '../core/node/link/settings.js';
import { scheduleWindows, type AppSettings } from './app-settings.js';
import { lanUrl, loopbackUrl } from './hub-urls.js';

/** What the tray and the window show: the mode, and what the embedded hub or node agent runs now. */
export function appState(c: { settings: AppSettings; hub: Hub | null; agent: NodeAgent | null; nodeHome: string; error: string | null; apiKey: string | null }): AppState {
  const ns = c.settings.mode === 'node' ? readSettings(c.nodeHome) : null;
  const { hub, agent } = c;
  const running = agent?.running();
  return {
    mode: c.settings.mode,
    startAtLogin: c.settings.startAtLogin,
    error: c.error,
    hub: hub
      ? {
          url: loopbackUrl(hub.url),
          serving: true,
          replicas: hub.scheduler.view
            .status()
            .filter((r) => r.state === 'ready')
            .map((r) => ({ model: r.model, where: r.node ?? 'hub' })),
          shards: hub.scheduler.view
            .shardStatus()
            .filter((s) => s.state === 'ready')
            .map((s) => ({ model: s.model, stages: s.stages.length })),
          nodes: hub.nodes.connected().length,
          paused: hub.availability.settings().paused,
          v1Url: `${lanUrl(hub.url, c.settings.hubListen)}/v1`,
          apiKeyRequired: beyondLoopback(c.settings.hubListen) || hub.keys.any,
          apiKey: c.apiKey,
          availability: hub.availability.state().state,
          reason: hub.availability.state().reason,
        }
      : null,
    node:
      agent && ns && running
        ? {
            name: ns.name,
            hub: ns.hub,
            connected: agent.connected,
            availability: agent.availability().state,
            reason: agent.availability().reason,
            paused: ns.paused,
            schedule: ns.schedule,
            outsideSchedule: inPauseWindow(parseSchedule(ns.schedule), new Date()),
            replicas: running.replicas,
            stages: running.stages.map((st) => ({ model: st.model, index: st.index, of: st.of })),
          }
        : null,
  };
}

/** What the settings page shows: the current mode's schedule, auto-pause, budgets, login item, LAN and /v1. */
export function settingsView(c: { settings: AppSettings; hub: Hub | null; node: NodeSettings | null }): SettingsView {
  const { node } = c;
  const hub = c.settings.mode === 'hub' ? c.hub : null;
  const schedule = hub ? hub.availability.settings().schedule : (node?.schedule ?? '');
  const support = autoPauseSupport();
  return {
    mode: c.settings.mode,
    schedule,
    windows: scheduleWindows(schedule),
    autoPause: hub ? hub.availability.settings().autoPause : (node?.autoPause ?? false),
    autoPauseUnavailable: support.available ? null : support.why,
    cpuBudgetMb: node ? node.cpuBudgetMb : c.settings.cpuBudgetMb,
    cacheBudgetMb: node ? node.cacheBudgetMb : null,
    startAtLogin: c.settings.startAtLogin,
    lan: c.settings.mode === 'hub' ? beyondLoopback(c.settings.hubListen) : null,
    v1Url: hub ? `${lanUrl(hub.url, c.settings.hubListen)}/v1` : node ? `${node.hub}/v1` : null,
  };
}
