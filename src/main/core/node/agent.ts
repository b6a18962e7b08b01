import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { WebSocket } from 'ws';
import { ErrorCode, RelayError, fromWireCode, isRelayError, wireCode } from '../../../shared/errors.js';
import { readDurable, writeDurable } from '../durable.js';
import {
  PROTOCOL_VERSION, TUNNEL_PATH, TUNNEL_STREAM_WINDOW, WS_SUBPROTOCOL, parseHubMessage,
  type Availability, type Command, type DeviceInfo, type HubToNode, type NodeToHub, type RunningReplica, type StageInfo, type StartReplica,
} from '../../../shared/protocol.js';
import { HostInventory } from '../gpu/inventory.js';
import type { LlamaInstall } from '../llama/install.js';
import { replicaPlacement } from '../llama/argv.js';
import { startLlamaServer, startRpcServer, type RunningLlamaServer, type RunningRpcServer } from '../llama/processes.js';
import { describeExit } from '../llama/supervisor.js';
import { ControlChannel, acceptStream, openStream, replyErr, replyOk } from '../tunnel/channel.js';
import { webSocketDuplex } from '../tunnel/transport.js';
import { Session, type YamuxStream } from '../tunnel/yamux/session.js';
import { autoPauseSupport, otherProcessesGpuMb } from '../gpu/nvml.js';
import { AutoPause, availabilityOf, inPauseWindow, parseSchedule, type PauseWindow } from './availability.js';
import { cacheReport, ModelCache } from './cache.js';
import { fillRpcCacheOffThread } from './rpc-cache.js';
import { SpareSockets } from '../llama/spare-sockets.js';
import { pinnedTls, tlsUrl } from './hub-client.js';

/**
 * A node: dials out to the hub, lends its device to the replicas and rpc-servers the hub asks for, and keeps
 * the weights the hub pushed. Everything it runs binds 127.0.0.1 and is reached only through the tunnel.
 */
export interface NodeSettings {
  /** What `relay up` persists in NODE_DIR/node.json. */
  hub: string;
  name: string;
  credential: string;
  paused: boolean;
  schedule: string;
  cpuBudgetMb: number;
  /** MiB for models (0: no cap), or 'auto' (the default: half of the free disk plus the cache). */
  cacheBudgetMb: number | 'auto';
  /** Opt-in: pause while other programs use the GPU (NVML), with hysteresis. */
  autoPause?: boolean;
  /** The hub's certificate (PEM), pinned at join: the tunnel is wss:// and accepts this certificate only. */
  hubCert?: string | null;
}

/** What may change while the agent runs. */
export type NodeSettingsChange = Partial<Pick<NodeSettings, 'schedule' | 'autoPause' | 'cpuBudgetMb' | 'cacheBudgetMb'>>;

export function settingsPath(home: string): string {
  return join(home, 'node.json');
}

/** The node's settings (null before it joined); an unreadable node.json falls back to its last good copy. */
export function readSettings(home: string): NodeSettings | null {
  return readDurable(settingsPath(home), (text) => JSON.parse(text) as NodeSettings)?.value ?? null;
}

export function writeSettings(home: string, s: NodeSettings): void {
  mkdirSync(home, { recursive: true });
  const p = settingsPath(home);
  // fsynced temp file, last good copy kept as node.json.bak, atomic rename (see durable.ts)
  writeDurable(p, `${JSON.stringify(s, null, 2)}\n`, 0o600);
  chmodSync(p, 0o600);
}

interface LocalReplica {
  id: string;
  sha256: string;
  /** The cached files it reads (the model's one file, or each part of a split model): in use while it runs. */
  files: readonly string[];
  /** The model's name on the hub (the alias it was started with), for the tray's status line. */
  model: string;
  server: RunningLlamaServer;
  stopping: boolean;
}

export class NodeAgent extends EventEmitter {
  readonly cache: ModelCache;
  private readonly replicas = new Map<string, LocalReplica>();
  private readonly rpcs = new Map<string, RunningRpcServer>();
  private readonly rpcStages = new Map<string, StageInfo>();
  private readonly inventory: HostInventory;
  private schedule: PauseWindow[];
  private session: Session | null = null;
  private control: ControlChannel<HubToNode, NodeToHub> | null = null;
  private activeStreams = 0;
  private lastSent: Availability | null = null;
  private stopped = false;
  private backoffMs = 500;
  private timers: NodeJS.Timeout[] = [];
  private localApi: Server | null = null;
  /** Ready connections to this node's llama-servers (see spare-sockets.ts). */
  private readonly spares = new SpareSockets();
  private orphanTimer: NodeJS.Timeout | null = null;
  private readonly autoPause = new AutoPause({ thresholdMb: 1024, pauseAfterMs: 30_000, resumeAfterMs: 120_000 });
  private autoPaused = false;
  connected = false;
  /** Set when the hub refused us for good (revoked, version mismatch): no more reconnects. */
  fatal: RelayError | null = null;

  constructor(
    readonly home: string,
    private settings: NodeSettings,
    private readonly d: { log: Logger; install: LlamaInstall; heartbeatMs?: number },
  ) {
    super();
    this.cache = new ModelCache(join(home, 'cache'), settings.cacheBudgetMb === 'auto' ? 'auto' : settings.cacheBudgetMb * 1024 * 1024);
    this.inventory = new HostInventory(d.install, settings.cpuBudgetMb);
    this.schedule = parseSchedule(settings.schedule);
  }

  // ---- availability ----

  availability(): { state: Availability; reason: string | null } {
    return availabilityOf({
      manualPause: this.settings.paused,
      scheduled: inPauseWindow(this.schedule, new Date()),
      autoPaused: this.autoPaused,
      activeStreams: this.activeStreams,
    });
  }

  /**
   * Change what the owner chose while the agent runs (the tray's settings page): the schedule and auto-pause
   * take effect at once (a window that covers now pauses the node), the CPU budget is what the next report
   * tells the hub, the cache budget holds from the next push. Saved to node.json.
   */
  async configure(change: NodeSettingsChange): Promise<void> {
    const next = { ...this.settings, ...change };
    let schedule: PauseWindow[];
    try {
      schedule = parseSchedule(next.schedule); // a bad schedule changes nothing
    } catch (err) {
      throw new RelayError(ErrorCode.INVALID_ARGUMENT, `schedule: ${(err as Error).message}`);
    }
    if (!Number.isInteger(next.cpuBudgetMb) || next.cpuBudgetMb < 0) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `the CPU budget must be a whole number of MB >= 0, got ${next.cpuBudgetMb}`);
    if (next.cacheBudgetMb !== 'auto' && (!Number.isInteger(next.cacheBudgetMb) || next.cacheBudgetMb < 0)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `the cache budget must be "auto" or a whole number of MB >= 0, got ${next.cacheBudgetMb}`);
    this.settings = next;
    writeSettings(this.home, next);
    this.schedule = schedule;
    this.inventory.setCpuBudgetMb(next.cpuBudgetMb);
    this.cache.budget = next.cacheBudgetMb === 'auto' ? 'auto' : next.cacheBudgetMb * 1024 * 1024;
    if (!next.autoPause) this.autoPaused = false;
    this.d.log.info({ schedule: next.schedule, auto_pause: next.autoPause ?? false, cpu_budget_mb: next.cpuBudgetMb, cache_budget_mb: next.cacheBudgetMb }, 'node settings changed');
    await this.availabilityChanged();
    if (this.connected) this.heartbeat(); // the hub sees the new schedule and devices now
  }

  /** The settings a running agent holds now. */
  current(): Readonly<NodeSettings> {
    return this.settings;
  }

  async setPaused(paused: boolean): Promise<void> {
    this.settings = { ...this.settings, paused };
    writeSettings(this.home, this.settings);
    await this.availabilityChanged();
  }

  private async availabilityChanged(): Promise<void> {
    const a = this.availability();
    if (a.state === 'paused') {
      // The card is released now, whatever the hub does: SIGTERM, SIGKILL after 10 s (well inside 30 s).
      await this.stopEverything(a.reason ?? 'paused');
    }
    if (a.state !== this.lastSent) {
      this.lastSent = a.state;
      this.control?.send({ type: 'availability', availability: a.state, reason: a.reason });
      this.emit('availability', a);
    }
  }

  private async stopEverything(why: string): Promise<void> {
    await Promise.all([...this.replicas.keys()].map((id) => this.stopReplica(id, why)));
    await Promise.all([...this.rpcs.keys()].map((id) => this.stopRpc(id)));
  }

  // ---- reports ----

  devices(): DeviceInfo[] {
    const now = Date.now();
    return this.inventory.devices().map((d) => ({ id: d.id, kind: d.kind, description: d.description, totalMb: d.totalMb, freeMb: d.reportedFreeMb, ageMs: Math.max(0, now - d.readAt) }));
  }

  runningReplicas(): RunningReplica[] {
    return [...this.replicas.values()].filter((r) => !r.stopping).map((r) => ({ replica: r.id, sha256: r.sha256, pid: r.server.child.pid ?? null }));
  }

  /** What runs here now (the tray's status line, the local API's /status): replicas, and the shard stages this node's ggml-rpc-servers serve. */
  running(): { replicas: { replica: string; model: string }[]; stages: StageInfo[] } {
    return {
      replicas: [...this.replicas.values()].filter((r) => !r.stopping).map((r) => ({ replica: r.id, model: r.model })),
      stages: [...this.rpcStages.values()],
    };
  }

  private heartbeat(): void {
    const a = this.availability();
    this.lastSent = a.state;
    this.control?.send({ type: 'heartbeat', devices: this.devices(), availability: a.state, reason: a.reason, replicas: this.runningReplicas(), cache: this.cache.inventory(), schedule: this.settings.schedule });
  }

  // ---- connection ----

  async start(): Promise<void> {
    await this.startLocalApi();
    const support = autoPauseSupport();
    if (this.settings.autoPause && !support.available) this.d.log.warn(`--auto-pause stays off on this machine: ${support.why}`);
    const tick = setInterval(() => {
      if (this.settings.autoPause) {
        const own = new Set([...this.replicas.values()].map((r) => r.server.child.pid ?? -1));
        for (const r of this.rpcs.values()) own.add(r.child.pid ?? -1);
        const other = otherProcessesGpuMb(own);
        if (other !== null) this.autoPaused = this.autoPause.update(other, Date.now());
      }
      if (this.connected) this.heartbeat();
      void this.availabilityChanged(); // schedule windows open and close with the clock
    }, this.d.heartbeatMs ?? 5000);
    tick.unref();
    this.timers.push(tick);
    void this.connectLoop();
  }

  private async connectLoop(): Promise<void> {
    while (!this.stopped && !this.fatal) {
      try {
        await this.connectOnce();
        this.backoffMs = 500;
      } catch (err) {
        if (isRelayError(err) && (err.code === ErrorCode.NODE_AUTH || err.code === ErrorCode.VERSION_MISMATCH)) {
          this.fatal = err;
          this.d.log.error({ code: err.code }, err.message);
          this.emit('fatal', err);
          return;
        }
        this.d.log.warn({ err: (err as Error).message, retryInMs: this.backoffMs }, 'hub connection failed');
      }
      if (this.stopped) return;
      const wait = this.backoffMs * (0.75 + Math.random() * 0.5);
      this.backoffMs = Math.min(this.backoffMs * 2, 30_000);
      await new Promise((r) => setTimeout(r, wait));
    }
  }

  /** One connection: resolves when it ends (so the loop reconnects), rejects on refusal. */
  private connectOnce(): Promise<void> {
    // A pinned hub: wss:// to the same host and port, that certificate only, checked before the credential is sent.
    const pin = this.settings.hubCert ? pinnedTls(this.settings.hubCert) : null;
    // Without a pin only an https:// hub (a certificate the system trusts) is dialled: the credential never
    // crosses in clear. A node that joined before its hub had a certificate has to join again.
    if (!pin && !this.settings.hub.startsWith('https:')) {
      return Promise.reject(new RelayError(ErrorCode.NODE_AUTH, `this node has not pinned ${this.settings.hub}'s certificate (it joined before the hub had one), and will not send its credential in clear: join again with a token from \`relay nodes token\``));
    }
    const url = pin ? `${tlsUrl(this.settings.hub, 'wss')}${TUNNEL_PATH}` : `${this.settings.hub.replace(/^http/, 'ws').replace(/\/+$/, '')}${TUNNEL_PATH}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, [WS_SUBPROTOCOL], {
        headers: { authorization: `Bearer ${this.settings.credential}`, 'x-relay-node': this.settings.name },
        perMessageDeflate: false,
        handshakeTimeout: 10_000,
        ...(pin ?? {}),
      });
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => {
          let msg = body;
          try {
            msg = (JSON.parse(body) as { error: { message: string } }).error.message;
          } catch { /* plain text */ }
          const code = res.statusCode === 401 ? ErrorCode.NODE_AUTH : res.statusCode === 426 ? ErrorCode.VERSION_MISMATCH : ErrorCode.HUB_UNREACHABLE;
          reject(new RelayError(code, `the hub refused this node (${res.statusCode}): ${msg}`));
        });
      });
      ws.on('error', (err) => reject(new RelayError(ErrorCode.HUB_UNREACHABLE, `cannot reach the hub at ${this.settings.hub}: ${err.message}`)));
      ws.on('open', () => {
        const session = new Session(webSocketDuplex(ws), { client: true, keepAliveIntervalMs: 10_000, keepAliveTimeoutMs: 20_000, streamWindow: TUNNEL_STREAM_WINDOW });
        const st = openStream(session, { kind: 'control' });
        const control = new ControlChannel<HubToNode, NodeToHub>(st, parseHubMessage);
        const a = this.availability();
        control.send({
          type: 'hello', protocol: PROTOCOL_VERSION, node: this.settings.name, llama: this.d.install.version,
          devices: this.devices(), cache: this.cache.inventory(), partials: this.cache.partials(), replicas: this.runningReplicas(),
          availability: a.state, reason: a.reason, schedule: this.settings.schedule,
        });
        const welcomeTimer = setTimeout(() => session.destroy(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'no welcome from the hub')), 10_000);
        control.on('message', (m: HubToNode) => {
          if (m.type === 'welcome') {
            clearTimeout(welcomeTimer);
            this.session = session;
            this.control = control;
            this.connected = true;
            this.lastSent = a.state;
            if (this.orphanTimer) clearTimeout(this.orphanTimer);
            this.orphanTimer = null;
            this.d.log.info({ hub: this.settings.hub, protocol: m.protocol }, 'connected to the hub');
            this.emit('connected');
            return;
          }
          if (m.type === 'error') {
            clearTimeout(welcomeTimer);
            this.d.log.error({ code: m.code }, `hub: ${m.message}`);
            if (m.code === 'version_mismatch') reject(new RelayError(ErrorCode.VERSION_MISMATCH, `the hub refused this node: ${m.message}`));
            // Another agent holds this credential: keep retrying with backoff (it may be stopping), never evict it.
            else reject(new RelayError(fromWireCode(m.code), `the hub refused this connection: ${m.message}`));
            return;
          }
          void this.onCommand(m);
        });
        session.on('stream', (s: YamuxStream) => void this.onStream(s));
        session.once('close', (err: Error) => {
          clearTimeout(welcomeTimer);
          const was = this.connected;
          this.connected = false;
          this.session = null;
          this.control = null;
          if (was) this.d.log.warn({ why: err.message }, 'lost the hub');
          // The hub already tore down what ran here; if it stays away, release the device too. A quick
          // reconnect keeps them, and the hub's reconciliation stops what it no longer expects.
          if (was && !this.orphanTimer) {
            const ms = Number(process.env.RELAY_NODE_ORPHAN_MS ?? 60_000);
            this.orphanTimer = setTimeout(() => {
              this.orphanTimer = null;
              if (!this.connected) void this.stopEverything(`the hub has been unreachable for ${ms} ms`);
            }, ms);
            this.orphanTimer.unref();
          }
          this.emit('disconnected');
          resolve();
        });
      });
    });
  }

  // ---- commands ----

  private async onCommand(c: Command): Promise<void> {
    const control = this.control;
    if (!control) return;
    try {
      switch (c.type) {
        case 'push-begin': {
          const offset = this.cache.resumeOffset(c.sha256, c.size);
          control.send(offset === null ? replyOk(c.id, { present: true }) : replyOk(c.id, { offset }));
          return;
        }
        case 'start-replica':
          control.send(replyOk(c.id, await this.startReplica(c)));
          return;
        case 'stop-replica':
          await this.stopReplica(c.replica, 'the hub asked');
          control.send(replyOk(c.id));
          return;
        case 'start-rpc': {
          const r = await this.startRpc(c.rpc, c.cache, c.stage, c.device);
          control.send(replyOk(c.id, { port: r.port }));
          return;
        }
        case 'stop-rpc':
          await this.stopRpc(c.rpc);
          control.send(replyOk(c.id));
          return;
        case 'evict':
          control.send(replyOk(c.id, { removed: this.cache.evict(c.sha256) }));
          return;
        case 'set-paused':
          await this.setPaused(c.paused);
          control.send(replyOk(c.id, { availability: this.availability().state }));
          return;
        case 'fill-rpc-cache': {
          if (!this.cache.has(c.sha256)) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `node ${this.settings.name} does not hold ${c.sha256.slice(0, 12)}…`);
          this.cache.touch(c.sha256);
          const layers = c.layers ?? null;
          // Parsed and hashed off the event loop; inside the cache budget (evicting least-recently-used models if it must).
          const room = (need: number): boolean => this.cache.makeRoom(need, c.sha256);
          this.cache.filling.add(c.sha256); // not pruned while a shard stage's cache is filled from it
          const idx = await fillRpcCacheOffThread(this.cache.pathOf(c.sha256), c.sha256, this.cache.rpcCacheDir, layers, room)
            .finally(() => this.cache.filling.delete(c.sha256));
          control.send(replyOk(c.id, { files: idx.files.length, bytes: idx.files.reduce((a, f) => a + f.size, 0) }));
          return;
        }
      }
    } catch (err) {
      const code = wireCode(isRelayError(err) ? err.code : ErrorCode.INTERNAL);
      control.send(replyErr(c.id, code, (err as Error).message.split('\n')[0] ?? 'failed'));
    }
  }

  private async startReplica(c: StartReplica): Promise<Record<string, unknown>> {
    if (this.availability().state === 'paused') throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, `node ${this.settings.name} is paused`);
    const existing = this.replicas.get(c.replica);
    if (existing && !existing.stopping) return { pid: existing.server.child.pid, port: existing.server.port };
    const files = c.parts ?? [c.sha256];
    for (const f of files) {
      if (!this.cache.has(f)) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `node ${this.settings.name} does not hold ${f.slice(0, 12)}…`);
    }
    for (const f of files) {
      this.cache.inUse.add(f);
      this.cache.touch(f);
    }
    try {
      const server = await startLlamaServer(this.d.install, {
        name: `llama-server[${c.alias}]`,
        model: c.parts ? this.cache.splitView(c.sha256, c.parts) : this.cache.pathOf(c.sha256),
        ctx: c.ctx,
        slots: c.slots,
        cacheType: c.cacheType,
        flashAttn: c.flashAttn ?? undefined,
        alias: c.alias,
        embedding: c.embedding,
        pooling: c.pooling ?? undefined,
        metrics: true,
        threads: process.env.RELAY_THREADS ? Number(process.env.RELAY_THREADS) : undefined,
        ...replicaPlacement(c.device, this.d.install.backend),
      });
      const rep: LocalReplica = { id: c.replica, sha256: c.sha256, files, model: c.alias, server, stopping: false };
      this.replicas.set(c.replica, rep);
      this.emit('running');
      void server.child.exited.then((info) => {
        if (this.replicas.get(c.replica) === rep) {
          this.replicas.delete(c.replica);
          this.emit('running');
        }
        this.release(files);
        if (!rep.stopping) this.d.log.warn({ replica: c.replica, exit: describeExit(info) }, 'replica exited');
        if (this.connected) this.heartbeat(); // the hub learns at once
      });
      this.d.log.info({ replica: c.replica, model: c.alias, port: server.port, pid: server.child.pid }, 'replica started');
      return { pid: server.child.pid, port: server.port };
    } catch (err) {
      this.release(files);
      throw err;
    }
  }

  /** Files no running replica reads any more may be evicted again. */
  private release(files: readonly string[]): void {
    const used = new Set([...this.replicas.values()].filter((r) => !r.stopping).flatMap((r) => r.files));
    for (const f of files) if (!used.has(f)) this.cache.inUse.delete(f);
  }

  async stopReplica(id: string, why: string): Promise<void> {
    const r = this.replicas.get(id);
    if (!r) return;
    r.stopping = true;
    this.d.log.info({ replica: id, why }, 'stopping replica');
    await r.server.child.terminate(10_000);
    this.replicas.delete(id);
    this.emit('running');
    this.release(r.files);
  }

  private async startRpc(id: string, cache: boolean, stage?: StageInfo, device?: string): Promise<RunningRpcServer> {
    if (this.availability().state === 'paused') throw new RelayError(ErrorCode.MODEL_UNAVAILABLE, `node ${this.settings.name} is paused`);
    const existing = this.rpcs.get(id);
    if (existing) return existing;
    // LLAMA_CACHE=<cache>/llama: ggml-rpc-server's tensor cache is <cache>/llama/rpc, inside the node's budget.
    // One rpc-server per stage, pinned to the stage's device (-d): two stages on this node use two devices.
    const r = await startRpcServer(this.d.install, { cache, cacheDir: join(this.cache.root, 'llama'), name: `ggml-rpc-server[${id}]`, device });
    this.rpcs.set(id, r);
    if (stage) this.rpcStages.set(id, stage);
    this.emit('running');
    void r.child.exited.then(() => {
      if (this.rpcs.get(id) !== r) return;
      this.rpcs.delete(id);
      this.rpcStages.delete(id);
      this.emit('running');
    });
    return r;
  }

  private async stopRpc(id: string): Promise<void> {
    const r = this.rpcs.get(id);
    if (!r) return;
    this.rpcs.delete(id);
    this.rpcStages.delete(id);
    this.emit('running');
    await r.child.terminate(10_000);
  }

  // ---- streams from the hub ----

  private async onStream(st: YamuxStream): Promise<void> {
    st.on('error', () => undefined);
    let header;
    try {
      header = await acceptStream(st);
    } catch {
      st.destroy();
      return;
    }
    if (header.kind === 'file') return this.onFile(st, header.sha256, header.offset, header.size);
    const port = header.kind === 'http' ? this.replicas.get(header.replica)?.server.port : header.kind === 'rpc' ? this.rpcs.get(header.rpc)?.port : undefined;
    if (port === undefined) {
      st.destroy();
      return;
    }
    // Pipe the stream to the local server on loopback; either side closing closes the other.
    this.activeStreams++;
    void this.availabilityChanged();
    // An http stream (a /v1 request for a replica here) takes a ready socket to its llama-server; rpc streams
    // connect fresh (ggml-rpc-server serves one connection at a time).
    const sock = header.kind === 'http' ? this.spares.take('127.0.0.1', port) : connect({ host: '127.0.0.1', port });
    sock.setNoDelay(true);
    const done = (): void => {
      this.activeStreams--;
      void this.availabilityChanged();
    };
    sock.once('close', done);
    sock.on('error', () => st.destroy());
    st.on('close', () => sock.destroy());
    st.pipe(sock);
    sock.pipe(st);
  }

  /** Emits 'push-progress' {sha256, done, total} while a push is received and 'push-end' {sha256, ok} after. */
  private async onFile(st: YamuxStream, sha256: string, offset: number, size: number): Promise<void> {
    let ok = false;
    try {
      await this.cache.receive(st, sha256, offset, size, (done) => this.emit('push-progress', { sha256, done, total: size }));
      ok = true;
      st.end(`${JSON.stringify({ ok: true })}\n`);
      if (this.connected) this.heartbeat();
    } catch (err) {
      const code = wireCode(isRelayError(err) ? err.code : ErrorCode.INTERNAL);
      this.d.log.warn({ sha256, code, message: (err as Error).message }, 'weight push failed');
      if (!st.destroyed && !st.writableEnded) st.end(`${JSON.stringify({ ok: false, code, message: (err as Error).message })}\n`);
    } finally {
      this.emit('push-end', { sha256, ok });
    }
  }

  // ---- local control (relay pause / resume / cache, the tray) ----

  private async startLocalApi(): Promise<void> {
    const token = randomBytes(24).toString('base64url');
    this.localApi = createServer((req, res) => {
      const send = (status: number, body: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.headers.authorization !== `Bearer ${token}`) return send(401, { error: { code: 'unauthorized', message: 'bad token' } });
      const route = `${req.method} ${req.url}`;
      if (route === 'POST /pause' || route === 'POST /resume') {
        void this.setPaused(route === 'POST /pause').then(() => send(200, this.statusJson()));
        return;
      }
      if (route === 'GET /status') return send(200, this.statusJson());
      try {
        if (route === 'GET /cache') return send(200, cacheReport(this.cache));
        if (route === 'POST /cache/prune') {
          const r = this.cache.prune();
          this.d.log.info({ removed: r.removed.length, partials: r.partials.length, kept: r.kept.length }, 'cache pruned (relay cache prune)');
          if (this.connected) this.heartbeat(); // the hub learns at once that the files are gone
          return send(200, r);
        }
      } catch (err) {
        // A file that changed under us (a fill writing, a file in use elsewhere): an answer, never a crash.
        return send(500, { error: { code: 'internal', message: (err as Error).message } });
      }
      send(404, { error: { code: 'not_found', message: 'no such endpoint' } });
    });
    await new Promise<void>((r) => this.localApi!.listen(0, '127.0.0.1', () => r()));
    const port = (this.localApi.address() as AddressInfo).port;
    writeFileSync(join(this.home, 'agent.json'), JSON.stringify({ port, token, pid: process.pid }), { mode: 0o600 });
  }

  statusJson(): Record<string, unknown> {
    const a = this.availability();
    return {
      name: this.settings.name,
      hub: this.settings.hub,
      connected: this.connected,
      availability: a.state,
      reason: a.reason,
      paused: this.settings.paused,
      schedule: this.settings.schedule,
      replicas: this.runningReplicas(),
      stages: [...this.rpcStages.values()],
      cache: this.cache.inventory(),
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.inventory.close();
    this.session?.close();
    await this.stopEverything('node shutting down');
    this.spares.close();
    await new Promise<void>((r) => (this.localApi ? this.localApi.close(() => r()) : r()));
  }
}
