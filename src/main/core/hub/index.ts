import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { HubConfig } from '../config.js';
import { HostInventory, type Device } from '../gpu/inventory.js';
import { ensureLlama } from '../llama/build.js';
import type { LlamaInstall } from '../llama/install.js';
import { ModelRegistry } from '../models/registry.js';
import { LlamaLauncher } from '../scheduler/launcher.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { Store } from '../store/store.js';
import { createApp } from './app.js';
import { HubAvailability } from './availability.js';
import { ApiKeys, beyondLoopback } from './keys.js';
import { HubMetrics } from './metrics.js';
import { NodeManager } from '../pool/manager.js';
import { joinSecret } from '../pool/tokens.js';

/**
 * The hub's composition root: store, registry, inventory, scheduler and the HTTP surface, wired once.
 * The tray app embeds exactly this; `relay hub` runs it headless.
 */
export interface Hub {
  readonly url: string;
  readonly port: number;
  readonly store: Store;
  readonly scheduler: Scheduler;
  readonly nodes: NodeManager;
  readonly availability: HubAvailability;
  readonly keys: ApiKeys;
  close(): Promise<void>;
}

export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export async function startHub(config: HubConfig, deps: { log: Logger; install?: LlamaInstall; devices?: () => Device[] }): Promise<Hub> {
  const log = deps.log;
  const install = deps.install ?? (await ensureLlama({ progress: (l) => log.info(`[llama build] ${l}`) }));
  const store = await Store.open(config.home);
  if (store.recovered !== null) log.warn({ path: store.path, why: store.recovered }, 'the store was unreadable: started from its last good copy (relay.json.bak)');
  if (store.migratedFrom !== null) log.warn({ path: store.path, from: store.migratedFrom }, 'store migrated to the current schema (backup kept beside it)');
  const registry = new ModelRegistry(store, log.child({ c: 'registry' }));
  const inventory = new HostInventory(install, config.cpuBudgetMb);
  const metrics = new HubMetrics();
  const nodes = new NodeManager({
    store,
    log: log.child({ c: 'nodes' }),
    hubVersion: packageVersion(),
    llamaVersion: install.version,
    secret: joinSecret(config.home),
    pushMaxBytesPerSec: config.pushMaxMbps > 0 ? config.pushMaxMbps * 1024 * 1024 : undefined,
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
  availability = new HubAvailability({
    store, log: log.child({ c: 'hub-availability' }),
    activeStreams: () => scheduler.hubStreams(),
    ownPids: () => scheduler.localPids(),
    onPaused: (reason) => void scheduler.hubPaused(reason),
  }, { schedule: config.hubSchedule, autoPause: config.hubAutoPause });
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
  const app = createApp({
    config, registry, scheduler, nodes, metrics, log, version: packageVersion(), availability, keys,
    llama: { tag: install.tag, version: install.version, backend: install.backend, backend_reason: install.backendReason },
  });

  const tls = config.tlsCertPath && config.tlsKeyPath ? { cert: readFileSync(config.tlsCertPath), key: readFileSync(config.tlsKeyPath) } : null;
  const server: Server = await new Promise((resolve, reject) => {
    // requestTimeout is checked every connectionsCheckingInterval (Node's default: 30 s).
    const opts = { connectionsCheckingInterval: 1000 };
    const s = tls ? createHttpsServer({ ...tls, ...opts }, app) : createHttpServer(opts, app);
    s.once('error', reject);
    s.listen(config.port, config.host, () => resolve(s));
  });
  nodes.attach(server);
  // Slow clients: the whole request (headers and body) must arrive within requestTimeout (408 otherwise; a
  // trickled body cannot hold a socket for ever). It does not limit the response: a 10-minute generation
  // still completes. Connections are capped, beyond which new ones are refused.
  server.requestTimeout = config.requestTimeoutMs;
  server.headersTimeout = Math.min(30_000, config.requestTimeoutMs);
  server.maxConnections = config.maxConnections;
  const port = (server.address() as AddressInfo).port;
  const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
  const url = `${tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;

  let closing: Promise<void> | null = null;
  return {
    url,
    port,
    store,
    scheduler,
    nodes,
    availability,
    keys,
    close() {
      closing ??= (async () => {
        nodes.close();
        server.closeIdleConnections();
        const closed = new Promise<void>((r) => server.close(() => r()));
        await availability.close();
        await scheduler.close();
        inventory.close();
        server.closeAllConnections();
        await closed;
        await store.close();
      })();
      return closing;
    },
  };
}
