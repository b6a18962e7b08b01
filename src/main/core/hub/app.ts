import { timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { ErrorCode, httpError, isRelayError, RelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import { effectiveFlashAttn } from '../llama/argv.js';
import type { ModelRegistry } from '../models/registry.js';
import { discover } from '../models/import.js';
import { modelFiles } from '../models/files.js';
import { applySettings, sameSettings } from '../scheduler/model-settings.js';
import { hubJoinToken, JOIN_TOKEN_TTL_MS } from '../pool/tokens.js';
import { MAX_ATTEMPTS, newAttempts, type Scheduler } from '../scheduler/scheduler.js';
import { fmtMb } from '../scheduler/fit.js';
import type { ModelRecord } from '../store/store.js';
import type { HubMetrics } from './metrics.js';
import type { NodeManager } from '../pool/manager.js';
import { proxyToReplica } from './proxy.js';
import type { HubAvailability } from './availability.js';
import type { History } from './history.js';
import { browserGuard, isLoopback, lanAddresses, ownHostNames, pageCsp, requireJson } from './guard.js';
import { serveEvents } from './events.js';
import { readBody } from './body.js';
import type { SpareSockets } from '../llama/spare-sockets.js';
import { beyondLoopback, type ApiKeys } from './keys.js';
import { cookieValue, DashboardSessions, SESSION_COOKIE, SESSION_TTL_MS } from './sessions.js';
import { hostname } from 'node:os';
import { TLSSocket } from 'node:tls';

export interface AppDeps {
  readonly config: HubConfig;
  readonly registry: ModelRegistry;
  readonly scheduler: Scheduler;
  readonly nodes: NodeManager;
  readonly metrics: HubMetrics;
  readonly log: Logger;
  readonly version: string;
  readonly llama: { tag: string; version: string; backend: string; backend_reason: string };
  readonly availability: HubAvailability;
  readonly keys: ApiKeys;
  /** Joining is refused on plain HTTP: the token and the credential only cross over TLS. */
  readonly nodesOverTlsOnly?: boolean;
  /** Ready connections to this machine's llama-servers (see spare-sockets.ts); none: a fresh connect each. */
  readonly spares?: SpareSockets;
  /** The CPU budget now (it can change while the hub runs); absent: the config's. */
  readonly cpuBudgetMb?: () => number;
  /** The charts' last minutes (history.ts), for a dashboard opened now. */
  readonly history?: History;
}

function sendError(res: Response, err: unknown, log: Logger): void {
  const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error');
  if (!isRelayError(err)) log.error({ err }, 'unhandled error');
  const { status, body } = httpError(e);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // pool_busy: when to try again (OpenAI clients honour Retry-After).
  if (typeof e.details.retry_after_s === 'number') res.setHeader('retry-after', String(e.details.retry_after_s));
  res.status(status).json(body);
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function bearer(req: Request): string | undefined {
  const h = req.get('authorization');
  const m = h ? /^Bearer\s+(.+)$/i.exec(h) : null;
  return m?.[1];
}

export { isLoopback };

/**
 * Admin API and status views: loopback clients always; others only with RELAY_ADMIN_TOKEN, or, for the
 * read-only views (/status, /metrics, GET /api/models), with the /v1 API key.
 */
export function adminAllowed(
  remote: string | undefined,
  token: string | undefined,
  c: Pick<HubConfig, 'adminToken' | 'apiKey'>,
  readOnly: boolean,
  isApiKey: (token: string) => boolean = () => false,
): boolean {
  if (isLoopback(remote)) return true;
  if (token && c.adminToken && safeEqual(token, c.adminToken)) return true;
  return Boolean(readOnly && token && ((c.apiKey && safeEqual(token, c.apiKey)) || isApiKey(token)));
}

/** Parse a raw JSON body; the caller has already enforced the size limit. */
function parseJson(req: Request): Record<string, unknown> {
  const raw = req.body as Buffer | undefined;
  if (!raw || raw.byteLength === 0) throw new RelayError(ErrorCode.INVALID_REQUEST, 'the request body is empty; send a JSON object');
  let v: unknown;
  try {
    v = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new RelayError(ErrorCode.INVALID_JSON, `the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new RelayError(ErrorCode.INVALID_REQUEST, 'the request body must be a JSON object');
  return v as Record<string, unknown>;
}

type Endpoint = 'chat/completions' | 'completions' | 'embeddings';

/** Field checks per endpoint: enough to refuse nonsense with a 400 before a replica is loaded for it. */
function validate(endpoint: Endpoint, body: Record<string, unknown>): string {
  const bad = (msg: string): never => {
    throw new RelayError(ErrorCode.INVALID_REQUEST, msg);
  };
  if (typeof body.model !== 'string' || body.model === '') bad('"model" must be a non-empty string naming a registered model');
  if (endpoint === 'chat/completions') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) bad('"messages" must be a non-empty array');
    for (const m of body.messages as unknown[]) {
      if (typeof m !== 'object' || m === null || typeof (m as { role?: unknown }).role !== 'string') bad('each message must be an object with a string "role"');
    }
  } else if (endpoint === 'completions') {
    const p = body.prompt;
    if (!(typeof p === 'string' || (Array.isArray(p) && p.length > 0))) bad('"prompt" must be a string or a non-empty array');
  } else if (!(typeof body.input === 'string' || (Array.isArray(body.input) && body.input.length > 0))) {
    bad('"input" must be a string or a non-empty array');
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') bad('"stream" must be a boolean');
  if (body.max_tokens !== undefined && !(Number.isInteger(body.max_tokens) && (body.max_tokens as number) >= 0)) bad('"max_tokens" must be a non-negative integer');
  return body.model as string;
}

export function createApp(d: AppDeps): express.Express {
  const { config, registry, scheduler, nodes, metrics, log } = d;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.use(browserGuard(ownHostNames(config.host, config.allowedHosts)));

  const body = readBody(config.maxBodyBytes);
  /** A JSON body: application/json only (415 otherwise), read up to the size limit. */
  const raw = (req: Request, res: Response, next: NextFunction): void => requireJson(req, res, (err?: unknown) => (err ? next(err) : body(req, res, next)));

  /** The last requests through /v1, for the dashboard. */
  const recent: { at: string; model: string; endpoint: string; status: number; prompt_tokens: number | null; completion_tokens: number | null; tokens_per_second: number | null; ms: number }[] = [];
  const remember = (r: (typeof recent)[number]): void => {
    recent.unshift(r);
    if (recent.length > 20) recent.pop();
  };

  /** /v1 needs a key when RELAY_API_KEY is set, when keys were made, and always on a hub that listens beyond loopback. */
  const keyRequired = (): boolean => Boolean(config.apiKey) || d.keys.any || beyondLoopback(config.host);
  const isApiKey = (token: string): boolean => Boolean((config.apiKey && safeEqual(token, config.apiKey)) || d.keys.verify(token));
  const requireApiKey = (req: Request, _res: Response, next: NextFunction): void => {
    if (!keyRequired()) return next();
    const token = bearer(req);
    if (token && isApiKey(token)) return next();
    next(new RelayError(ErrorCode.INVALID_API_KEY, !config.apiKey && !d.keys.any
      ? `this hub listens on ${config.host}, beyond this machine, so /v1 needs an API key: make one with \`relay keys create NAME\` (or on the dashboard) and send Authorization: Bearer <key>`
      : 'a valid API key is required: send Authorization: Bearer <key>'));
  };

  const logins = new DashboardSessions();
  const requireAdmin = (readOnly: boolean) => (req: Request, _res: Response, next: NextFunction): void => {
    const remote = config.loopbackAdmin ? req.socket.remoteAddress : undefined;
    if (adminAllowed(remote, bearer(req), config, readOnly, isApiKey)) return next();
    // A browser logged in through a one-time link (relay dashboard --link): admin, or read-only views only.
    const role = logins.role(cookieValue(req.get('cookie'), SESSION_COOKIE));
    if (role === 'admin' || (role === 'read' && readOnly)) return next();
    next(new RelayError(ErrorCode.FORBIDDEN, role === 'read'
      ? 'this dashboard login is read-only'
      : 'the admin API answers loopback clients, a dashboard login (relay dashboard --link on the hub machine), or RELAY_ADMIN_TOKEN'));
  };

  // ---- dashboard logins from other machines ----
  app.post('/api/dashboard/links', requireAdmin(false), raw, (req, res, next) => {
    try {
      const body = parseJson(req);
      const link = logins.mintLink(body.read_only === true ? 'read' : 'admin');
      const port = req.socket.localPort;
      const path = `/login?t=${link.token}`;
      // The addresses other machines may reach this hub at (the user picks the one their network uses).
      const hosts = [...new Set([hostname(), ...lanAddresses()])];
      const scheme = req.socket instanceof TLSSocket ? 'https' : 'http';
      res.status(201).json({ path, urls: hosts.map((h) => `${scheme}://${h}:${port}${path}`), expires_at: new Date(link.expiresAt).toISOString(), read_only: body.read_only === true });
    } catch (err) {
      next(err);
    }
  });

  app.get('/login', (req, res) => {
    const s = logins.exchange(String(req.query.t ?? ''));
    if (!s) {
      res.status(401).type('text').send('This dashboard link is unknown, used or expired: ask for a new one with `relay dashboard --link` on the hub machine.\n');
      return;
    }
    const secure = req.socket instanceof TLSSocket ? '; Secure' : '';
    res.setHeader('set-cookie', `${SESSION_COOKIE}=${s.sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${Math.floor(SESSION_TTL_MS / 1000)}${secure}`);
    res.redirect(303, '/');
  });

  // ---- OpenAI-compatible /v1 ----
  app.get('/v1/models', requireApiKey, (_req, res) => {
    res.json({
      object: 'list',
      data: registry.list().map((m) => {
        const a = scheduler.availability(m);
        return { id: m.name, object: 'model', created: Math.floor(Date.parse(m.added_at) / 1000), owned_by: 'relay', available: a.available, unavailable_reason: a.reason };
      }),
    });
  });

  for (const endpoint of ['chat/completions', 'completions', 'embeddings'] as const) {
    app.post(`/v1/${endpoint}`, requireApiKey, raw, async (req, res, next) => {
      const t0 = Date.now();
      let model = '';
      const done = (status: number, usage: { promptTokens: number; completionTokens: number; tokensPerSecond: number | null } | null = null): void => {
        metrics.requests.add({ endpoint, status: String(status) });
        remember({
          at: new Date(t0).toISOString(), model, endpoint, status, ms: Date.now() - t0,
          prompt_tokens: usage?.promptTokens ?? null, completion_tokens: usage?.completionTokens ?? null, tokens_per_second: usage?.tokensPerSecond ?? null,
        });
      };
      try {
        const body = parseJson(req);
        const name = validate(endpoint, body);
        model = name;
        const record = registry.require(name);
        if (endpoint === 'embeddings' && !record.embedding) {
          throw new RelayError(ErrorCode.MODEL_NOT_EMBEDDING, `"${name}" is not registered as an embedding model (relay models add FILE --embedding)`, { model: name });
        }
        if (endpoint !== 'embeddings' && record.embedding) {
          throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" is an embedding model: use /v1/embeddings`, { model: name });
        }
        // Failover before the first byte: a placement that fails before answering is excluded and the request
        // goes to another placement or a fresh one, at most MAX_ATTEMPTS tries in all (loads that failed under
        // it count too); after the first byte the client gets the error event.
        const attempts = newAttempts();
        const gone = new AbortController();
        res.on('close', () => {
          if (!res.writableFinished) gone.abort();
        });
        for (;;) {
          const lease = await scheduler.acquire(name, attempts, gone.signal);
          if (res.destroyed) {
            lease.release();
            return;
          }
          const outcome = await proxyToReplica({
            lease, path: `/v1/${endpoint}`, body: req.body as Buffer, req, res, log, spares: d.spares,
            onDone: (status, usage) => {
              done(status, usage);
              if (usage) {
                metrics.tokens.add({ model: name, kind: 'prompt' }, usage.promptTokens);
                metrics.tokens.add({ model: name, kind: 'completion' }, usage.completionTokens);
              }
            },
          });
          if (outcome.kind === 'done') return;
          scheduler.failedBefore(lease, attempts, outcome.error);
          if (attempts.errors.length >= MAX_ATTEMPTS) throw outcome.error;
        }
      } catch (err) {
        const status = isRelayError(err) ? httpError(err).status : 500;
        done(status);
        next(err);
      }
    });
  }

  // ---- admin API ----
  app.get('/api/models', requireAdmin(true), (_req, res) => {
    res.json({ models: registry.list().map((m) => modelView(m)) });
  });

  app.post('/api/models', requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const input = {
        path: body.path as string,
        name: body.name === undefined || body.name === null ? undefined : String(body.name),
        required_vram_mb: body.required_vram_mb as number | null | undefined,
        embedding: body.embedding === undefined ? undefined : Boolean(body.embedding),
        settings: ['context_size', 'parallel_slots', 'kv_cache_type', 'flash_attn'].some((k) => body[k] !== undefined) ? applySettings(undefined, body) : undefined,
      };
      if (req.query.progress === '1') {
        // NDJSON: progress lines while hashing, then the result (the CLI draws a progress bar from them).
        res.status(200).setHeader('content-type', 'application/x-ndjson');
        res.flushHeaders();
        try {
          const r = await registry.add(input, (done, total) => res.write(`${JSON.stringify({ progress: { done, total } })}\n`));
          if (r.settingsChanged) await scheduler.stopModel(r.model.name, 'its settings changed');
          res.end(`${JSON.stringify({ model: modelView(r.model), created: r.created })}\n`);
        } catch (err) {
          const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, String(err));
          res.end(`${JSON.stringify(httpError(e).body)}\n`);
        }
        return;
      }
      const r = await registry.add(input);
      if (r.settingsChanged) await scheduler.stopModel(r.model.name, 'its settings changed');
      res.status(r.created ? 201 : 200).json({ model: modelView(r.model), created: r.created });
    } catch (err) {
      next(err);
    }
  });

  // A model's own settings: context, slots, KV cache type, flash attention (null: back to the pool's default).
  // Its running placements stop, so the next request loads it with the new settings.
  app.patch('/api/models/:name', requireAdmin(false), raw, async (req, res, next) => {
    try {
      const name = String(req.params.name);
      const before = registry.require(name).settings;
      const settings = applySettings(before, parseJson(req));
      const m = await registry.setSettings(name, settings);
      if (!sameSettings(before, m.settings)) await scheduler.stopModel(name, 'its settings changed');
      res.json({ model: modelView(m) });
    } catch (err) {
      next(err);
    }
  });

  // Import the GGUFs already on this machine: Ollama's store, LM Studio's folder, or any folder.
  app.post('/api/models/import', requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const source = body.source;
      if (typeof source !== 'string' || !(source === 'ollama' || source === 'lmstudio' || isAbsolute(source))) {
        throw new RelayError(ErrorCode.INVALID_REQUEST, '"source" must be "ollama", "lmstudio" or an absolute folder on the hub');
      }
      const found = discover(source);
      if (found.found.length === 0 && found.skipped.length === 0 && !existsSync(found.root)) {
        throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `nothing to import: ${found.root} does not exist`, { path: found.root });
      }
      const settings = ['context_size', 'parallel_slots', 'kv_cache_type', 'flash_attn'].some((k) => body[k] !== undefined) ? applySettings(undefined, body) : undefined;
      const r = await registry.importAll(found, settings);
      // Models already registered whose settings this import changed: their placements restart with them.
      await Promise.all(r.registered.filter((x) => x.settingsChanged).map((x) => scheduler.stopModel(x.name, 'its settings changed')));
      res.json({ source: found.source, root: found.root, ...r });
    } catch (err) {
      next(err);
    }
  });

  app.delete('/api/models/:name', requireAdmin(false), async (req, res, next) => {
    try {
      const name = String(req.params.name);
      registry.require(name);
      await scheduler.stopModel(name, 'model removed from the registry');
      const m = await registry.remove(name);
      // Every node's copy goes too (unless another registered name uses the same file).
      await nodes.evictUnregistered();
      res.json({ removed: modelView(m) });
    } catch (err) {
      next(err);
    }
  });

  // ---- API keys for /v1 (the key is in the 201 answer only) ----
  app.get('/api/keys', requireAdmin(true), (_req, res) => {
    res.json({ keys: d.keys.list(), required: keyRequired() });
  });

  app.post('/api/keys', requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      res.status(201).json(await d.keys.create(String(body.name ?? '')));
    } catch (err) {
      next(err);
    }
  });

  app.delete('/api/keys/:name', requireAdmin(false), async (req, res, next) => {
    try {
      await d.keys.revoke(String(req.params.name));
      res.json({ revoked: String(req.params.name) });
    } catch (err) {
      next(err);
    }
  });

  // ---- nodes ----
  // Joining is open to the network: the join token is the credential for this one call.
  app.post('/api/nodes/join', raw, async (req, res, next) => {
    try {
      if (d.nodesOverTlsOnly && !(req.socket instanceof TLSSocket)) {
        throw new RelayError(ErrorCode.FORBIDDEN, 'join over TLS: `relay up --token` does so itself with a token that carries this hub\'s certificate fingerprint');
      }
      const body = parseJson(req);
      const r = await nodes.join(String(body.token ?? ''), String(body.name ?? ''));
      res.status(201).json(r);
    } catch (err) {
      next(err);
    }
  });

  // A node's owner opens the pool's dashboard from the node's tray: the node asks with its credential (over TLS,
  // like its tunnel) for a one-time login link. Read-only: a node's owner is trusted with their machine, not
  // with the hub's models, keys and nodes.
  app.post('/api/nodes/dashboard-link', (req, res, next) => {
    try {
      if (d.nodesOverTlsOnly && !(req.socket instanceof TLSSocket)) throw new RelayError(ErrorCode.FORBIDDEN, 'nodes ask for dashboard links over TLS (the credential never crosses in clear)');
      const node = nodes.authenticate(req);
      const link = logins.mintLink('read');
      res.status(201).json({ path: `/login?t=${link.token}`, expires_at: new Date(link.expiresAt).toISOString(), read_only: true, node: node.name });
    } catch (err) {
      next(err);
    }
  });

  // "Add a node": a fresh join token that carries this hub's address for nodes, and the command that uses it.
  app.post('/api/nodes/token', requireAdmin(false), (req, res, next) => {
    try {
      // The address nodes reach this hub at: the one it listens on, else the one this request came in on (the
      // dashboard opened from another machine), else the first LAN address; loopback when it listens on nothing else.
      const local = (req.socket.localAddress ?? '').replace(/^::ffff:/, '');
      const lan = !beyondLoopback(config.host) ? undefined
        : config.host !== '0.0.0.0' && config.host !== '::' ? config.host
          : local && !isLoopback(local) ? local : lanAddresses()[0];
      const host = lan ?? '127.0.0.1';
      const hubUrl = `http://${host.includes(':') ? `[${host}]` : host}:${req.socket.localPort}`;
      const token = hubJoinToken(config.home, hubUrl);
      res.status(201).json({
        token, hub_url: hubUrl, command: `npx relay up --hub ${hubUrl} --token ${token}`,
        expires_at: new Date(Date.now() + JOIN_TOKEN_TTL_MS).toISOString(),
        note: lan ? null : 'this hub listens on 127.0.0.1 only: a node on another machine cannot reach it (start it with --listen 0.0.0.0, or tick "other machines" in the tray\'s setup)',
      });
    } catch (err) {
      next(err);
    }
  });

  app.get('/api/nodes', requireAdmin(true), (_req, res) => {
    res.json({ nodes: nodes.status() });
  });

  for (const action of ['pause', 'resume'] as const) {
    app.post(`/api/nodes/:name/${action}`, requireAdmin(false), async (req, res, next) => {
      try {
        const name = String(req.params.name);
        const conn = nodes.get(name);
        if (!conn) throw new RelayError(ErrorCode.NODE_NOT_FOUND, `node "${name}" is not connected`);
        const r = await conn.command({ type: 'set-paused', paused: action === 'pause' }, 40_000);
        res.json({ node: name, availability: r.data?.availability });
      } catch (err) {
        next(err);
      }
    });
  }

  app.post('/api/nodes/:name/revoke', requireAdmin(false), async (req, res, next) => {
    try {
      await nodes.revoke(String(req.params.name));
      res.json({ revoked: String(req.params.name) });
    } catch (err) {
      next(err);
    }
  });

  const modelView = (m: ModelRecord) => {
    const need = scheduler.need(m);
    const a = scheduler.availability(m);
    // A file that is gone is shown as such (and a request for it gets model_file_missing, never stale bytes).
    const file = registry.fileState(m);
    return {
      ...m,
      file,
      need_mb: Math.ceil(need.needMb),
      need: { weights_mb: Math.ceil(need.weightsMb), kv_mb: Math.ceil(need.kvMb), overhead_mb: Math.ceil(need.overheadMb), ctx: need.ctx, slots: need.slots, kv_scale: need.kvScale, kv_cache_type: need.kvCacheType },
      fits_now: a.available && file !== 'missing',
      shortfall: file === 'missing' ? `the file is gone from ${modelFiles(m).find((f) => !existsSync(f.path))?.path ?? m.path} (register it again, or remove the model)` : a.reason,
    };
  };

  // ---- status, metrics, dashboard ----
  const buildStatus = () => ({
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
      api_key_required: keyRequired(),
      queue_max: config.queueMax,
      queue_timeout_ms: config.queueTimeoutMs,
      max_placements_per_model: config.maxPlacementsPerModel,
    },
    hub: (() => {
      const a = d.availability.state();
      const s = d.availability.settings();
      return { availability: a.state, reason: a.reason, paused: s.paused, schedule: s.schedule, auto_pause: s.autoPause };
    })(),
    devices: scheduler.deviceStatus(),
    models: registry.list().map((m) => {
      const v = modelView(m);
      return { name: m.name, size: m.size, sha256: m.sha256, path: m.path, parts: modelFiles(m).length, file: v.file, settings: m.settings ?? null, need_mb: v.need_mb, need: v.need, fits_now: v.fits_now, shortfall: v.shortfall, embedding: m.embedding };
    }),
    replicas: scheduler.status(),
    shards: scheduler.shardStatus(),
    backoffs: scheduler.backoffs(),
    queues: scheduler.queues(),
    api_keys: d.keys.list(),
    nodes: nodes.status().map((n) => ({ ...n, devices: scheduler.nodeDevicesFree(String(n.name), n.devices as never) })),
    pushes: [...nodes.pushes.values()],
    recent,
  });

  // The hub's own devices: pause/resume (the dashboard's button, `relay pause --hub`), schedule, auto-pause.
  app.post('/api/hub/availability', requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const change: { paused?: boolean; schedule?: string; autoPause?: boolean } = {};
      if (body.paused !== undefined) {
        if (typeof body.paused !== 'boolean') throw new RelayError(ErrorCode.INVALID_REQUEST, '"paused" must be true or false');
        change.paused = body.paused;
      }
      if (body.schedule !== undefined) {
        if (typeof body.schedule !== 'string') throw new RelayError(ErrorCode.INVALID_REQUEST, '"schedule" must be a string such as "mon-fri 09:00-17:30"');
        change.schedule = body.schedule;
      }
      if (body.auto_pause !== undefined) {
        if (typeof body.auto_pause !== 'boolean') throw new RelayError(ErrorCode.INVALID_REQUEST, '"auto_pause" must be true or false');
        change.autoPause = body.auto_pause;
      }
      await d.availability.set(change);
      res.json(buildStatus().hub);
    } catch (err) {
      next(err);
    }
  });

  app.get('/status', requireAdmin(true), (_req, res) => {
    res.json(buildStatus());
  });

  // Live updates for the dashboard: the status as server-sent events, once a second while it changes.
  app.get('/events', requireAdmin(true), (req, res) => serveEvents(req, res, () => JSON.stringify(buildStatus())));

  // The charts' last five minutes, for a page opened now (it appends what /events brings).
  app.get('/api/history', requireAdmin(true), (_req, res) => {
    res.json(d.history?.snapshot() ?? { window_ms: 0, interval_ms: 0, series: {} });
  });

  app.get('/metrics', requireAdmin(true), (_req, res) => {
    res.type('text/plain; version=0.0.4').send(metrics.render(scheduler.status().map((r) => r.state)));
  });

  const dashboard = new URL('../../../../../src/renderer/index.html', import.meta.url);
  app.get('/', (_req, res) => {
    const html = readFileSync(dashboard, 'utf8');
    res.setHeader('content-security-policy', pageCsp(html));
    res.type('html').send(html);
  });

  app.use((_req, _res, next) => next(new RelayError(ErrorCode.NOT_FOUND, 'no such endpoint')));

  // Body-parser errors (size, aborted) become coded errors; everything else goes through httpError.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = err as { type?: string; status?: number; limit?: number };
    if (e?.type === 'entity.too.large') {
      return sendError(res, new RelayError(ErrorCode.PAYLOAD_TOO_LARGE, `the request body is larger than ${fmtMb(config.maxBodyBytes / 1024 / 1024)} (${config.maxBodyBytes} bytes)`), log);
    }
    if (e?.type === 'request.aborted' || e?.type === 'stream.not.readable') return res.destroy();
    sendError(res, err, log);
  });
  return app;
}
