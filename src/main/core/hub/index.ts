import { packageVersion } from '../app-files.js';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import { HostInventory, type Device } from '../gpu/inventory.js';
import { ensureLlama } from '../llama/build.js';
import { ownChildPids } from '../llama/supervisor.js';
import type { LlamaInstall } from '../llama/install.js';
import { Pulls } from '../models/hf/pulls.js';
import { ModelRegistry } from '../models/registry.js';
import { LlamaLauncher } from '../scheduler/launch/launcher.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { Store } from '../store/store.js';
import { createApp } from './app.js';
import { SpareSockets } from '../llama/spare-sockets.js';
import { HubAvailability } from './state/availability.js';
import { ApiKeys } from './http/keys.js';
import { beyondLoopback } from './http/guard.js';
import { HubMetrics } from './state/metrics.js';
import { startHistory } from './state/history.js';
import { PieceCache } from '../gguf/piece-cache.js';
import { KeyUsage } from './state/usage.js';
import { keepSpeeds } from './state/speeds-store.js';
import { Admission } from './http/admission.js';
import { NodeManager } from '../pool/manager.js';
import { joinSecret } from '../pairing/tokens.js';
import { certFingerprint, ensureHubCert } from '../pairing/hub-cert.js';
import { listenOllama, type OllamaListener } from './api/ollama/listener.js';

/**
 * The hub's composition root: store, registry, inventory, scheduler and the HTTP surface, wired once.
 * The tray app embeds exactly this; `relay hub` runs it headless.
 */
export interface Hub {
  readonly url: string;
  readonly port: number;
  /** The Ollama port's URL (--ollama-port), or null. */
  readonly ollamaUrl: string | null;
  readonly store: Store;
  readonly scheduler: Scheduler;
  readonly nodes: NodeManager;
  readonly availability: HubAvailability;
  readonly keys: ApiKeys;
  /** The CPU budget (MiB) for replicas on the hub's own CPU, changed while it runs (the tray's settings). */
  setCpuBudgetMb(mb: number): void;
  close(): Promise<void>;
}

export { packageVersion };

export async function startHub(config: HubConfig, deps: { log: Logger; install?: LlamaInstall; devices?: () => Device[] }): Promise<Hub> {
  const log = deps.log;
  const install = deps.install ?? (await ensureLlama({ progress: (l) => log.info(`[llama build] ${l}`) }));
  const store = await Store.open(config.home);
  if (store.recovered !== null) log.warn({ path: store.path, why: store.recovered }, 'the store was unreadable: started from its last good copy (relay.json.bak)');
  if (store.migratedFrom !== null) log.warn({ path: store.path, from: store.migratedFrom }, 'store migrated to the current schema (backup kept beside it)');
  const registry = new ModelRegistry(store, log.child({ c: 'registry' }));
  await registry.readLayouts();
  const pulls = new Pulls({
    dir: config.downloadDir ?? join(config.home, 'models'),
    access: { endpoint: config.hfEndpoint, token: config.hfToken ?? null },
    log: log.child({ c: 'pull' }),
    registered: (name) => registry.get(name)?.path ?? null,
    // The download hashed every file as it wrote it: registered without a second pass.
    register: async (p) => {
      await registry.add({ path: p.path, name: p.name, mmproj: p.projector ?? undefined, mmprojSha256: p.projector ? p.hashes.get(p.projector) : undefined }, undefined, p.hashes);
    },
  });
  const inventory = new HostInventory(install, config.cpuBudgetMb);
  await inventory.start(); // the first listing and driver reading; the rest happens in the background
  const metrics = new HubMetrics();
  const nodes = new NodeManager({
    store,
    log: log.child({ c: 'nodes' }),
    hubVersion: packageVersion(),
    llamaVersion: install.version,
    secret: joinSecret(config.home),
    pushMaxBytesPerSec: config.pushMaxMibPerSec > 0 ? config.pushMaxMibPerSec * 1024 * 1024 : undefined,
    pushStallMs: config.pushStallMs,
  });
  // The scheduler asks whether the hub's devices are paused; a change to paused stops its placements.
  let availability: HubAvailability | null = null;
  const scheduler = new Scheduler({
    config,
    registry,
    launcher: new LlamaLauncher({ config, install, nodes, log: log.child({ c: 'launcher' }) }),
    nodes,
    devices: deps.devices ?? (() => inventory.devices()),
    log: log.child({ c: 'scheduler' }),
    hubPaused: () => availability?.paused() ?? false,
    onLoad: (model, seconds) => {
      metrics.loads.add({ model });
      metrics.loadSeconds.add({ model }, seconds);
    },
  });
  availability = new HubAvailability(
    {
      store,
      log: log.child({ c: 'hub-availability' }),
      activeStreams: () => scheduler.view.hubStreams(),
      ownPids: ownChildPids,
      onPaused: (reason) => void scheduler.hubPaused(reason),
    },
    { schedule: config.hubSchedule, autoPause: config.hubAutoPause },
  );
  // Replica bookkeeping follows the nodes: lost or paused → torn down; every report → reconciled.
  nodes.on('lost', (conn, err: Error) => scheduler.nodeLost(conn, `disconnected (${err.message})`));
  nodes.on('availability', (conn) => {
    if (conn.availability === 'paused') void scheduler.nodePaused(conn);
  });
  nodes.on('connected', (conn) => {
    void scheduler.reconcile(conn);
    conn.on('heartbeat', () => void scheduler.reconcile(conn));
  });
  const keys = new ApiKeys(store);
  if (beyondLoopback(config.host) && !config.apiKey && !keys.any) {
    log.warn(`the hub listens on ${config.host}: /v1 answers only requests with an API key; make one with \`relay keys create NAME\``);
  }
  const spares = new SpareSockets();
  const pieces = new PieceCache();
  const usage = new KeyUsage(store);
  const speeds = keepSpeeds(scheduler.placer.speeds, store);
  const charts = startHistory({
    counters: () => metrics.totals(),
    placements: () => [...scheduler.view.status(), ...scheduler.view.shardStatus()],
    hubDevices: () => scheduler.view.deviceStatus(),
    nodeDevices: () => nodes.connected().flatMap((c) => scheduler.view.nodeDevicesFree(c.name, c.devices).map((d) => ({ node: c.name, id: d.id, totalMb: d.totalMb, freeMb: d.freeMb }))),
  });
  const app = createApp({
    config,
    registry,
    pulls,
    scheduler,
    nodes,
    metrics,
    log,
    version: packageVersion(),
    availability,
    keys,
    nodesOverTlsOnly: true,
    spares,
    cpuBudgetMb: () => inventory.cpuBudget,
    history: charts.history,
    pieces: (m) => pieces.get(m),
    usage,
    admission: new Admission({ keys, usage }),
    llama: { tag: install.tag, version: install.version, backend: install.backend, backend_reason: install.backendReason },
  });

  // Nodes always reach the hub over TLS. With a certificate of the user's own the whole hub is HTTPS; without
  // one the hub makes its own (RELAY_HOME/tls/) and speaks both on one port: a connection that starts with a
  // TLS handshake gets TLS (nodes, pinned by the fingerprint in their join token), any other plain HTTP (/v1
  // clients, the dashboard), on which the tunnel and joining are refused.
  const userTls = config.tlsCertPath && config.tlsKeyPath ? { cert: readFileSync(config.tlsCertPath), key: readFileSync(config.tlsKeyPath) } : null;
  const own = userTls ? null : ensureHubCert(config.home);
  writeFileSync(join(config.home, 'tls-fingerprint'), `${certFingerprint((userTls?.cert ?? own!.cert).toString())}\n`);
  // requestTimeout is checked every connectionsCheckingInterval (Node's default: 30 s).
  const opts = { connectionsCheckingInterval: 1000 };
  const secure = createHttpsServer({ ...(userTls ?? { cert: own!.cert, key: own!.key }), ...opts }, app);
  const plain = userTls ? null : createHttpServer(opts, app);
  const httpServers = plain ? [secure, plain] : [secure];
  // Every accepted socket, whichever server it went to (or none yet: a browser's preconnect sends nothing until
  // it needs the socket): destroyed on close, so closing never waits on one. A socket silent for 30 s is cut.
  const sockets = new Set<Socket>();
  const server: NetServer = await new Promise((resolve, reject) => {
    const s = plain
      ? createNetServer((socket) => {
          // What http.Server does for the sockets it accepts itself: without it Nagle holds each small SSE chunk
          // written while the previous one is unacknowledged (a token waits for the client's delayed ACK).
          socket.setNoDelay(true);
          sockets.add(socket);
          socket.setTimeout(30_000, () => socket.destroy());
          socket.once('close', () => sockets.delete(socket));
          socket.once('readable', () => {
            socket.setTimeout(0);
            const first = socket.read(1) as Buffer | null;
            if (!first) return socket.destroy();
            socket.unshift(first);
            (first[0] === 0x16 ? secure : plain).emit('connection', socket); // 0x16: a TLS handshake record
          });
        })
      : secure;
    s.once('error', reject);
    s.listen(config.port, config.host, () => resolve(s));
  });
  server.maxConnections = config.maxConnections;
  // The HTTP servers get their sockets from the one listener above, never listen themselves: 'listening' is
  // what starts their connection tracking (requestTimeout → 408, closeAllConnections).
  if (plain) for (const h of httpServers) h.emit('listening');
  nodes.attach(secure);
  // Downloads the last run left unfinished go on where their part files stop.
  pulls.resumeAll();
  plain?.on('upgrade', (_req: IncomingMessage, socket: Duplex) => {
    const body = JSON.stringify({ error: { code: 'node_auth', message: 'nodes connect to this hub over TLS (wss://, pinned by the join token): join again with a token from `relay nodes token`' } });
    socket.end(`HTTP/1.1 426 Upgrade Required\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  // Slow clients: the whole request (headers and body) must arrive within requestTimeout (408 otherwise; a
  // trickled body cannot hold a socket for ever). It does not limit the response: a 10-minute generation
  // still completes. Connections are capped, beyond which new ones are refused.
  for (const h of httpServers) {
    h.requestTimeout = config.requestTimeoutMs;
    h.headersTimeout = Math.min(30_000, config.requestTimeoutMs);
    // An idle kept-alive connection stays open longer than clients keep theirs (undici 4 s, httpx 5 s, most up
    // to a minute): with Node's own 5 s the hub closed connections that clients were just reusing, and the
    // request failed with "other side closed" (seen in the chaos suite). The connection cap still bounds them.
    h.keepAliveTimeout = 65_000;
  }
  const port = (server.address() as AddressInfo).port;
  const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
  const urlAt = (p: number): string => `${userTls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${p}`;
  let closing: Promise<void> | null = null;
  let ollama: OllamaListener | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      nodes.close();
      charts.close();
      await pulls.close();
      for (const h of httpServers) h.closeIdleConnections();
      ollama?.close();
      const closed = new Promise<void>((r) => server.close(() => r()));
      await availability.close();
      await scheduler.close();
      spares.close();
      inventory.close();
      for (const h of httpServers) h.closeAllConnections();
      for (const sock of sockets) sock.destroy();
      await closed;
      await usage.close(); // what was counted since the last write
      await speeds.close();
      await store.close();
    })();
    return closing;
  };
  // Apps that find Ollama only at its port: the same app on a second one (ollama/listener.ts).
  if (config.ollamaPort !== null) {
    try {
      ollama = await listenOllama(app, { host: config.host, port: config.ollamaPort, tls: userTls, requestTimeoutMs: config.requestTimeoutMs, maxConnections: config.maxConnections });
    } catch (err) {
      await close();
      throw err;
    }
  }

  return {
    url: urlAt(port),
    port,
    ollamaUrl: ollama ? urlAt(ollama.port) : null,
    store,
    scheduler,
    nodes,
    availability,
    keys,
    setCpuBudgetMb(mb: number) {
      if (!Number.isInteger(mb) || mb < 0) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `the CPU budget must be a whole number of MB >= 0, got ${mb}`);
      inventory.setCpuBudgetMb(mb);
      log.info({ cpu_budget_mb: mb }, "the hub's CPU budget changed");
    },
    close,
  };
}
