import { EventEmitter } from 'node:events';
import { ErrorCode, RelayError, fromWireCode } from '../../../shared/errors.js';
import type { Availability, CommandBody, DeviceInfo, Hello, HubToNode, NodeToHub, Reply, RunningReplica, RunningRpc, StreamHeader } from '../../../shared/protocol.js';
import { ControlChannel, openStream } from '../tunnel/channel.js';
import type { Session, YamuxStream } from '../tunnel/yamux/session.js';
import type { LinkMeasure } from '../tunnel/yamux/pacer.js';

/**
 * How long a node may stay silent after a ping when something waits on it (a stalled request, a command, a push):
 * not one byte from it in this time and it is lost. While its bytes still arrive (the ping's answer queued behind
 * them on a slow link) it gets up to PROBE_MAX_MS.
 */
export const PROBE_TIMEOUT_MS = 2000;
export const PROBE_MAX_MS = 10_000;
/** A command waiting for its answer pings the node this often: a node that went silent is found in seconds. */
export const PROBE_EVERY_MS = 2500;

/**
 * One connected node as the hub sees it: its yamux session and control channel, and its last report
 * (devices, availability, schedule, cached files, replicas). Commands are request/reply on the control
 * channel; http, rpc and file streams are opened on the session.
 */
export class NodeConn extends EventEmitter {
  devices: DeviceInfo[];
  /** When the hub received `devices` (its own clock): with each device's ageMs, when its reading was taken. */
  devicesAt = Date.now();
  availability: Availability;
  reason: string | null;
  schedule: string;
  cache = new Map<string, number>();
  /** The partial pushes its hello reported (sha256s), until the hub has looked at them. */
  partials: string[];
  replicas: RunningReplica[];
  rpcs: RunningRpc[];
  lastSeen = Date.now();
  readonly connectedAt = Date.now();
  /** The node's relay version (null: relay 0.1.0 or older). */
  readonly relay: string | null;
  /** rpc/http/file bytes this session moved, by kind (for /status and the shard bench). */
  readonly bytes = { http: 0, rpc: 0, file: 0 };

  constructor(
    readonly name: string,
    readonly session: Session,
    readonly control: ControlChannel<NodeToHub, HubToNode>,
    hello: Hello,
  ) {
    super();
    this.relay = hello.relay ?? null;
    this.devices = hello.devices;
    this.devicesAt = Date.now();
    this.availability = hello.availability;
    this.reason = hello.reason;
    this.schedule = hello.schedule ?? '';
    this.replicas = hello.replicas;
    this.rpcs = hello.rpcs ?? [];
    for (const f of hello.cache) this.cache.set(f.sha256, f.size);
    this.partials = hello.partials.map((f) => f.sha256);
    // The link's round trip from the start (the keep-alive's first ping is seconds away): the shard planner's hop cost.
    session.ping(PROBE_TIMEOUT_MS).catch(() => undefined);
  }

  /** The link as the tunnel measured it: the least ping round trip (ms) and the push read rate (bytes/ms), null until seen. */
  link(): LinkMeasure {
    return this.session.link();
  }

  get alive(): boolean {
    return !this.session.closed;
  }

  /**
   * Send a command and wait for its reply. A node that sleeps or loses its link sends no reply and no error: while
   * the reply is outstanding the node is pinged every PROBE_EVERY_MS, so it is declared lost in seconds, not when
   * the command's own timeout (a 40 GB load's deadline) runs out.
   */
  async command(msg: CommandBody, timeoutMs = 60_000): Promise<Reply> {
    const watch = setInterval(() => void this.probe(`waiting for its answer to ${msg.type}`), PROBE_EVERY_MS);
    watch.unref();
    let r: Reply;
    try {
      r = await this.control.request(msg, timeoutMs);
    } finally {
      clearInterval(watch);
    }
    if (!r.ok) throw new RelayError(fromWireCode(r.code), `node ${this.name}: ${r.message ?? 'command failed'}`, { node: this.name });
    return r;
  }

  private probing: Promise<boolean> | null = null;

  /**
   * Is the node there? A ping after which it sends nothing for PROBE_TIMEOUT_MS (or that it leaves unanswered for
   * PROBE_MAX_MS) ends its session at once (the node is lost: everything on it fails, requests fail over).
   * Concurrent callers share one ping. `why` goes in the log.
   */
  probe(why: string): Promise<boolean> {
    if (!this.alive) return Promise.resolve(false);
    this.probing ??= this.session
      .ping(PROBE_TIMEOUT_MS, PROBE_MAX_MS)
      .then(
        () => true,
        (err: unknown) => {
          const within = err instanceof RelayError && typeof err.details.within === 'string' ? err.details.within : `${PROBE_TIMEOUT_MS} ms`;
          this.session.destroy(new RelayError(ErrorCode.KEEPALIVE_TIMEOUT, `node ${this.name} did not answer a ping within ${within} (${why})`, { node: this.name }));
          return false;
        },
      )
      .finally(() => {
        this.probing = null;
      });
    return this.probing;
  }

  open(header: StreamHeader): YamuxStream {
    return openStream(this.session, header);
  }

  close(reason: string): void {
    this.control.send({ type: 'error', code: 'closed', message: reason });
    this.session.close();
  }
}
