import { EventEmitter } from 'node:events';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCode, RelayError, fromWireCode, isRelayError, wireCode } from '../../../shared/errors.js';
import { parseHubMessage } from '../../../shared/protocol-validate.js';
import type { Availability, Command, DeviceInfo, HubToNode, NodeToHub, RunningReplica, StageInfo } from '../../../shared/protocol.js';
import { HostInventory } from '../gpu/inventory.js';
import type { LlamaInstall } from '../llama/install.js';
import { ControlChannel, openStream, replyErr, replyOk } from '../tunnel/channel.js';
import { serveHubStream } from './streams.js';
import { runCommand } from './commands.js';
import type { Session, YamuxStream } from '../tunnel/yamux/session.js';
import { autoPauseSupport, otherProcessesGpuMb } from '../gpu/nvml.js';
import { AutoPause, availabilityOf, inPauseWindow, parseSchedule, type PauseWindow } from '../availability.js';
import { pathLengthProblem } from './cache/windows-files.js';
import { ModelCache } from './cache/cache.js';
import { cacheReport } from './cache/cache-report.js';
import { SpareSockets } from '../llama/spare-sockets.js';
import { ownChildPids } from '../llama/supervisor.js';
import { openTunnel } from './link/link.js';
import { applyChange, cacheBudgetBytes, writeSettings, type NodeSettings, type NodeSettingsChange } from './link/settings.js';
import { Workloads } from './work/workloads.js';
import { deviceInfo, heartbeatOf, helloOf, type ReportSource } from './reports.js';
import { startLocalApi } from './link/local-api.js';
import { nodeConfigFromEnv, type NodeConfig } from '../config.js';

/** Auto-pause's detector: over 1 GiB of other programs' GPU memory for 30 s pauses, under it for 2 min resumes. */
const newAutoPause = (): AutoPause => new AutoPause({ thresholdMb: 1024, pauseAfterMs: 30_000, resumeAfterMs: 120_000 });

/**
 * A node: dials out to the hub, lends its device to the replicas and rpc-servers the hub asks for (workloads.ts),
 * and keeps the weights the hub pushed (cache.ts). Everything it runs binds 127.0.0.1 and is reached only
 * through the tunnel. Its settings are settings.ts's; `relay pause` and the tray reach it through local-api.ts.
 */
export class NodeAgent extends EventEmitter {
  readonly cache: ModelCache;
  /** The replicas and rpc-servers the hub asked for. */
  readonly work: Workloads;
  private readonly config: NodeConfig;
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
  private autoPause = newAutoPause();
  private autoPaused = false;
  connected = false;
  /** Set when the hub refused us for good (revoked, version mismatch): no more reconnects. */
  fatal: RelayError | null = null;

  constructor(
    readonly home: string,
    private settings: NodeSettings,
    private readonly deps: { log: Logger; install: LlamaInstall; heartbeatMs?: number; config?: NodeConfig },
  ) {
    super();
    this.cache = new ModelCache(join(home, 'cache'), cacheBudgetBytes(settings.cacheBudgetMb));
    const tooLong = pathLengthProblem(home, process.platform); // Windows' MAX_PATH (windows-files.ts)
    if (tooLong) deps.log.warn(tooLong);
    this.inventory = new HostInventory(deps.install, settings.cpuBudgetMb);
    this.schedule = parseSchedule(settings.schedule);
    this.config = deps.config ?? nodeConfigFromEnv();
    this.work = new Workloads({ install: deps.install, cache: this.cache, log: deps.log, threads: this.config.threads, slotsDir: join(home, 'slots') });
    this.work.on('running', () => this.emit('running'));
    this.work.on('exited', () => {
      if (this.connected) this.heartbeat(); // the hub learns at once
    });
  }

  // ---- availability ----

  availability(): { state: Availability; reason: string | null } {
    return availabilityOf({
      manualPause: this.settings.paused,
      hubPause: this.settings.hubPaused ?? false,
      scheduled: inPauseWindow(this.schedule, new Date()),
      autoPaused: this.autoPaused,
      activeStreams: this.activeStreams,
    });
  }

  /**
   * Change what the owner chose while the agent runs (the tray's settings, saved to node.json): the schedule and
   * auto-pause at once (a window over now pauses the node), the CPU and cache budgets from the next report and push.
   */
  async configure(change: NodeSettingsChange): Promise<void> {
    const { next, schedule } = applyChange(this.settings, change); // a bad change changes nothing
    writeSettings(this.home, next); // saved first: a failed write changes nothing
    if (next.autoPause !== this.settings.autoPause) this.autoPause = newAutoPause(); // no state from the last time it was on
    this.settings = next;
    this.schedule = schedule;
    this.inventory.setCpuBudgetMb(next.cpuBudgetMb);
    this.cache.budget = cacheBudgetBytes(next.cacheBudgetMb);
    if (!next.autoPause) this.autoPaused = false;
    this.deps.log.info({ schedule: next.schedule, auto_pause: next.autoPause ?? false, cpu_budget_mb: next.cpuBudgetMb, cache_budget_mb: next.cacheBudgetMb }, 'node settings changed');
    await this.availabilityChanged();
    if (this.connected) this.heartbeat(); // the hub sees the new schedule and devices now
  }

  /** The settings a running agent holds now. */
  current(): Readonly<NodeSettings> {
    return this.settings;
  }

  /** The owner's own pause (the tray, `relay pause`): only the owner resumes it. */
  async setPaused(paused: boolean): Promise<void> {
    this.settings = { ...this.settings, paused };
    writeSettings(this.home, this.settings);
    await this.availabilityChanged();
  }

  /** The hub's pause (its dashboard): the hub resumes only its own; a node its owner paused stays paused. */
  async setHubPaused(paused: boolean): Promise<void> {
    this.settings = { ...this.settings, hubPaused: paused };
    writeSettings(this.home, this.settings);
    await this.availabilityChanged();
  }

  private async availabilityChanged(): Promise<void> {
    const a = this.availability();
    // The hub hears first (it stops placing here, and takes what the stops below make fail as the pause it is).
    if (a.state !== this.lastSent) {
      this.lastSent = a.state;
      this.control?.send({ type: 'availability', availability: a.state, reason: a.reason });
      this.emit('availability', a);
    }
    if (a.state === 'paused') {
      // The card is released now, whatever the hub does: SIGTERM, SIGKILL after 10 s (well inside 30 s), loading
      // llama-servers included.
      await this.stopEverything(a.reason ?? 'paused');
    }
  }

  private stopEverything(why: string): Promise<void> {
    return this.work.stopAll(why);
  }

  // ---- reports ----

  devices(): DeviceInfo[] {
    const now = Date.now();
    return this.inventory.devices().map((d) => deviceInfo(d, now));
  }

  runningReplicas(): RunningReplica[] {
    return this.work.reported();
  }

  /** What runs here now (the tray's status line, the local API's /status). */
  running(): { replicas: { replica: string; model: string }[]; stages: StageInfo[] } {
    return this.work.running();
  }

  /** What reports.ts reads of this node. */
  private reportSource(): ReportSource {
    return { name: this.settings.name, schedule: this.settings.schedule, work: this.work, cache: this.cache, devices: () => this.devices(), availability: () => this.availability() };
  }

  private heartbeat(): void {
    const m = heartbeatOf(this.reportSource());
    this.lastSent = m.availability;
    this.control?.send(m);
  }

  // ---- connection ----

  async start(): Promise<void> {
    await this.inventory.start(); // the first listing and driver reading; the rest happens in the background
    this.localApi = await startLocalApi(this.home, {
      setPaused: (p) => this.setPaused(p),
      status: () => this.statusJson(),
      cache: () => cacheReport(this.cache),
      prune: () => {
        const r = this.cache.prune();
        this.deps.log.info({ removed: r.removed.length, partials: r.partials.length, kept: r.kept.length }, 'cache pruned (relay cache prune)');
        if (this.connected) this.heartbeat(); // the hub learns at once that the files are gone
        return r;
      },
    });
    if (this.settings.autoPause && !autoPauseSupport().available) this.deps.log.warn(`--auto-pause stays off on this machine: ${autoPauseSupport().why}`);
    const tick = setInterval(() => {
      if (this.settings.autoPause) {
        // relay's own children count from the moment they are spawned (a llama-server still loading included).
        const other = otherProcessesGpuMb(ownChildPids());
        if (other !== null) this.autoPaused = this.autoPause.update(other, Date.now());
      }
      // While shard stages run, ggml-rpc-server saves activations to its cache: what is no weight goes each tick.
      const freed = this.work.reportedRpcs().length > 0 ? this.cache.pruneRpcCache() : 0;
      if (freed > 0) this.deps.log.info({ bytes: freed }, 'removed what ggml-rpc-server saved beyond the weights');
      if (this.connected) this.heartbeat();
      void this.availabilityChanged(); // schedule windows open and close with the clock
    }, this.deps.heartbeatMs ?? this.config.heartbeatMs);
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
          this.deps.log.error({ code: err.code }, err.message);
          this.emit('fatal', err);
          return;
        }
        this.deps.log.warn({ err: (err as Error).message, retryInMs: this.backoffMs }, 'hub connection failed');
      }
      if (this.stopped) return;
      const wait = this.backoffMs * (0.75 + Math.random() * 0.5);
      this.backoffMs = Math.min(this.backoffMs * 2, 30_000);
      await new Promise((r) => setTimeout(r, wait));
    }
  }

  /** One connection: resolves when it ends (so the loop reconnects), rejects on refusal. */
  private connectOnce(): Promise<void> {
    return openTunnel(this.settings).then(
      (session) =>
        new Promise((resolve, reject) => {
          const st = openStream(session, { kind: 'control' });
          const control = new ControlChannel<HubToNode, NodeToHub>(st, parseHubMessage);
          const hello = helloOf(this.reportSource(), this.deps.install.version);
          control.send(hello);
          const welcomeTimer = setTimeout(() => session.destroy(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'no welcome from the hub')), 10_000);
          control.on('message', (m: HubToNode) => {
            if (m.type === 'welcome') {
              clearTimeout(welcomeTimer);
              this.session = session;
              this.control = control;
              this.connected = true;
              this.lastSent = hello.availability;
              if (this.orphanTimer) clearTimeout(this.orphanTimer);
              this.orphanTimer = null;
              this.deps.log.info({ hub: this.settings.hub, protocol: m.protocol }, 'connected to the hub');
              this.emit('connected');
              return;
            }
            if (m.type === 'error') {
              clearTimeout(welcomeTimer);
              this.deps.log.error({ code: m.code }, `hub: ${m.message}`);
              if (m.code === 'version_mismatch') reject(new RelayError(ErrorCode.VERSION_MISMATCH, `the hub refused this node: ${m.message}`));
              // Another agent holds this credential: keep retrying with backoff (it may be stopping), never evict it.
              else reject(new RelayError(fromWireCode(m.code), `the hub refused this connection: ${m.message}`));
              return;
            }
            void this.onCommand(m);
          });
          control.once('close', (err: Error) => session.destroy(err)); // the control stream is the session
          session.on('stream', (s: YamuxStream) => void this.onStream(s));
          session.once('close', (err: Error) => {
            clearTimeout(welcomeTimer);
            const was = this.connected;
            this.connected = false;
            this.session = null;
            this.control = null;
            if (was) this.deps.log.warn({ why: err.message }, 'lost the hub');
            // The hub already tore down what ran here; if it stays away, release the device too. A quick
            // reconnect keeps them, and the hub's reconciliation stops what it no longer expects.
            if (was && !this.orphanTimer) {
              const ms = this.config.orphanMs;
              this.orphanTimer = setTimeout(() => {
                this.orphanTimer = null;
                if (!this.connected) void this.stopEverything(`the hub has been unreachable for ${ms} ms`);
              }, ms);
              this.orphanTimer.unref();
            }
            this.emit('disconnected');
            resolve();
          });
        }),
    );
  }

  // ---- commands (commands.ts) ----

  private async onCommand(c: Command): Promise<void> {
    const control = this.control;
    if (!control) return;
    try {
      const target = { name: this.settings.name, cache: this.cache, work: this.work, log: this.deps.log, availability: () => this.availability(), setHubPaused: (p: boolean) => this.setHubPaused(p) };
      control.send(replyOk(c.id, await runCommand(c, target)));
    } catch (err) {
      const code = wireCode(isRelayError(err) ? err.code : ErrorCode.INTERNAL);
      control.send(replyErr(c.id, code, (err as Error).message.split('\n')[0] ?? 'failed'));
    }
  }

  // ---- streams from the hub (streams.ts) ----

  /** Emits 'push-progress' {sha256, done, total} while a push is received and 'push-end' {sha256, ok} after. */
  private onStream(st: YamuxStream): Promise<void> {
    return serveHubStream(st, {
      work: this.work,
      cache: this.cache,
      spares: this.spares,
      log: this.deps.log,
      active: (delta) => {
        this.activeStreams += delta;
        void this.availabilityChanged();
      },
      progress: (e) => this.emit('push-progress', e),
      pushed: (e) => {
        if (e.ok && this.connected) this.heartbeat();
        this.emit('push-end', e);
      },
    });
  }

  // ---- local control (relay pause / resume / cache, the tray: local-api.ts) ----

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
      stages: this.work.running().stages,
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
