import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { appFile } from '../../app-files.js';
import { effectiveFlashAttn } from '../../llama/argv.js';
import { modelFiles } from '../../models/files.js';
import { pageCsp } from '../http/guard.js';
import { serveEvents } from './events.js';
import { poolPicture } from './picture.js';
import type { AppDeps, HubHttp, Mount } from '../http/context.js';
import { modelViewer } from './model-view.js';
import { keyViews } from './keys-view.js';
import type { HubAvailabilityStatus, StatusDto } from '../../../../shared/status.js';
import { nodeDeviceStatus } from '../../pool/manager.js';

/** The hub's own devices as /status and POST /api/hub/availability show them. */
export function hubView(d: AppDeps): HubAvailabilityStatus {
  const a = d.availability.state();
  const s = d.availability.settings();
  return { availability: a.state, reason: a.reason, paused: s.paused, schedule: s.schedule, auto_pause: s.autoPause };
}

/** /status: the whole pool as the dashboard, `relay status` and the tests read it. */
export function buildStatus({ deps: d, auth, recent, moves }: HubHttp): StatusDto {
  const modelView = modelViewer(d);
  const { config, registry, scheduler, nodes } = d;
  const keys = keyViews(d);
  const parts = {
    hub: hubView(d),
    devices: scheduler.view.deviceStatus(),
    replicas: scheduler.view.status(),
    shards: scheduler.view.shardStatus(),
    backoffs: scheduler.view.backoffs(),
    // Each connected node's devices with what relay's placements there have reserved taken off.
    nodes: nodes.status().map((n) => {
      const conn = nodes.get(n.name);
      return conn ? { ...n, devices: scheduler.view.nodeDevicesFree(n.name, conn.devices).map((dv) => ({ ...nodeDeviceStatus(dv), speed: dv.speed })) } : n;
    }),
    pushes: [...nodes.pushes.values()],
  };
  return {
    ...parts,
    relay: d.version,
    llama_cpp: d.llama,
    kv_cache_type: config.kvCacheType,
    settings: {
      context_size: config.contextSize,
      replica_ctx: config.replicaCtx,
      parallel_slots: config.parallelSlots,
      kv_cache_type: config.kvCacheType,
      flash_attn: config.flashAttn ?? `unset: ${effectiveFlashAttn(config.kvCacheType, undefined)} for a ${config.kvCacheType} cache`,
      cpu_budget_mb: d.cpuBudgetMb?.() ?? config.cpuBudgetMb,
      keep_alive_ms: config.keepAliveMs,
      api_key_required: auth.keyRequired(),
      queue_max: config.queueMax,
      queue_timeout_ms: config.queueTimeoutMs,
      max_placements_per_model: config.maxPlacementsPerModel,
    },
    models: registry.list().map((m) => {
      const v = modelView(m);
      return {
        name: m.name,
        size: m.size,
        sha256: m.sha256,
        path: m.path,
        parts: modelFiles(m).length,
        file: v.file,
        settings: m.settings ?? null,
        need_mb: v.need_mb,
        need: v.need,
        ctx_note: v.ctx_note,
        fits_now: v.fits_now,
        shortfall: v.shortfall,
        why_not: v.why_not,
        embedding: m.embedding,
        mmproj: m.mmproj ? { path: m.mmproj.path, sha256: m.mmproj.sha256, size: m.mmproj.size } : null,
        draft: m.draft ? { name: m.draft.name, path: m.draft.path, sha256: m.draft.sha256, size: m.draft.size, max: m.draft.max, min: m.draft.min } : null,
        spec: { setting: m.settings?.spec ?? 'auto', ...scheduler.specs.choose(m, false), tally: scheduler.specs.get(m.name) },
      };
    }),
    queues: scheduler.view.queues(),
    api_keys: keys.keys,
    no_key_usage: keys.noKey,
    machines: poolPicture(parts),
    pulls: d.pulls.list(),
    recent: recent.list,
    moves: moves.list,
  };
}

/** /status, its live /events, the charts' history, /metrics and the dashboard page. */
export const mountStatus: Mount = (app, h) => {
  const { deps: d, auth } = h;
  const { scheduler, metrics } = d;
  app.get('/status', auth.requireAdmin(true), (_req, res) => {
    res.json(buildStatus(h));
  });

  // Live updates for the dashboard: the status as server-sent events, once a second while it changes.
  app.get('/events', auth.requireAdmin(true), (req, res) => serveEvents(req, res, () => JSON.stringify(buildStatus(h))));

  // The charts' last five minutes, for a page opened now (it appends what /events brings).
  app.get('/api/history', auth.requireAdmin(true), (_req, res) => {
    res.json(d.history?.snapshot() ?? { window_ms: 0, interval_ms: 0, series: {} });
  });

  app.get('/metrics', auth.requireAdmin(true), (_req, res) => {
    res.type('text/plain; version=0.0.4').send(metrics.render({ replicas: scheduler.view.status().map((r) => r.state), shards: scheduler.view.shardStatus().map((sh) => sh.state) }));
  });

  // The page's own scripts (src/renderer/ui/*.js): by name from that folder only, nothing else under it.
  const ui = appFile('src/renderer/ui');
  const scripts = new Set(readdirSync(ui).filter((f) => /^[a-z-]+\.js$/.test(f)));
  app.get('/ui/:file', (req, res, next) => {
    if (!scripts.has(req.params.file)) return next();
    res.type('text/javascript').setHeader('cache-control', 'no-cache');
    res.send(readFileSync(join(ui, req.params.file), 'utf8'));
  });

  const dashboard = appFile('src/renderer/index.html');
  app.get('/', (_req, res) => {
    const html = readFileSync(dashboard, 'utf8');
    res.setHeader('content-security-policy', pageCsp(html));
    res.type('html').send(html);
  });
};
