import { EventEmitter } from 'node:events';
import { RelayError, fromWireCode } from '../../../shared/errors.js';
import type { Availability, CommandBody, DeviceInfo, Hello, HubToNode, NodeToHub, Reply, RunningReplica, StreamHeader } from '../../../shared/protocol.js';
import { ControlChannel, openStream } from '../tunnel/channel.js';
import type { Session, YamuxStream } from '../tunnel/yamux/session.js';

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
  replicas: RunningReplica[];
  lastSeen = Date.now();
  readonly connectedAt = Date.now();
  /** rpc/http/file bytes this session moved, by kind (for /status and the shard bench). */
  readonly bytes = { http: 0, rpc: 0, file: 0 };

  constructor(
    readonly name: string,
    readonly session: Session,
    readonly control: ControlChannel<NodeToHub, HubToNode>,
    hello: Hello,
  ) {
    super();
    this.devices = hello.devices;
    this.devicesAt = Date.now();
    this.availability = hello.availability;
    this.reason = hello.reason;
    this.schedule = hello.schedule ?? '';
    this.replicas = hello.replicas;
    for (const f of hello.cache) this.cache.set(f.sha256, f.size);
  }

  get alive(): boolean {
    return !this.session.closed;
  }

  async command(msg: CommandBody, timeoutMs = 60_000): Promise<Reply> {
    const r = await this.control.request(msg, timeoutMs);
    if (!r.ok) throw new RelayError(fromWireCode(r.code), `node ${this.name}: ${r.message ?? 'command failed'}`, { node: this.name });
    return r;
  }

  open(header: StreamHeader): YamuxStream {
    return openStream(this.session, header);
  }

  close(reason: string): void {
    this.control.send({ type: 'error', code: 'closed', message: reason });
    this.session.close();
  }
}
