import { EventEmitter } from 'node:events';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WebSocketServer, type WebSocket } from 'ws';
import { ErrorCode, RelayError, wireCode } from '../../../shared/errors.js';
import { PROTOCOL_VERSION, TUNNEL_PATH, TUNNEL_STREAM_WINDOW, WS_SUBPROTOCOL, type Availability, type CachedFile, type Hello, type HubToNode, type NodeToHub } from '../../../shared/protocol.js';
import { parseNodeMessage } from '../../../shared/protocol-validate.js';
import { ControlChannel, TUNNEL_KEEPALIVE, TUNNEL_PRIORITY_LEVELS, acceptStream } from '../tunnel/channel.js';
import { webSocketDuplex } from '../tunnel/transport.js';
import { Session, type YamuxStream } from '../tunnel/yamux/session.js';
import type { ModelRecord, NodeRecord, Store } from '../store/store.js';
import { usesFile } from '../models/files.js';
import { checkJoinToken, credentialHash, newCredential } from '../pairing/tokens.js';
import { NodeConn } from './conn.js';
import { refusal, refusalRecord } from './versions.js';
import { nodeStatus } from './node-status.js';
import { WeightPusher, type PushProgress } from './push.js';
import type { NodeStatus } from '../../../shared/status.js';

/** The subprotocol to answer a node with: this hub's own when offered, else the node's relay.vN (refused at its hello). */
function relayProtocol(offered: readonly string[]): string | null {
  return offered.includes(WS_SUBPROTOCOL) ? WS_SUBPROTOCOL : (offered.find((p) => /^relay\.v\d{1,4}$/.test(p)) ?? null);
}

export { NodeConn } from './conn.js';
export { nodeDeviceStatus } from './node-status.js';
export type { PushProgress } from './push.js';

/**
 * The hub's side of the nodes: authenticates WebSocket upgrades on /tunnel, runs one yamux session per node,
 * keeps each node's last report (devices, availability, cache, replicas), and offers the operations Ensure
 * needs: push weights, start and stop replicas, open http streams.
 */
export class NodeManager extends EventEmitter {
  private readonly conns = new Map<string, NodeConn>();
  private readonly pusher: WeightPusher;
  // A node of another protocol version is let in as far as its hello (the tunnel and the hello's head are the same in
  // every version: protocol.ts), so it is refused by name, saying which side to update, and shown on the dashboard.
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024, handleProtocols: (offered) => relayProtocol([...offered]) ?? false });

  constructor(
    private readonly deps: {
      store: Store;
      log: Logger;
      hubVersion: string;
      llamaVersion: string;
      secret: Buffer;
      helloTimeoutMs?: number;
      pushMaxBytesPerSec?: number;
      pushStallMs?: number;
    },
  ) {
    super();
    this.pusher = new WeightPusher({ log: deps.log, pushMaxBytesPerSec: deps.pushMaxBytesPerSec, stallMs: deps.pushStallMs });
  }

  /** Weight pushes running now (push.ts). */
  get pushes(): ReadonlyMap<string, PushProgress> {
    return this.pusher.pushes;
  }

  /** Make sure `conn` holds every file of `model` (push.ts). */
  push(conn: NodeConn, model: ModelRecord): Promise<void> {
    return this.pusher.push(conn, model);
  }

  // ---- membership ----

  records(): readonly NodeRecord[] {
    return this.deps.store.data.nodes;
  }

  async join(token: string, name: string): Promise<{ name: string; credential: string }> {
    if (typeof name !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(name)) throw new RelayError(ErrorCode.INVALID_REQUEST, 'a node name is 1-64 letters, digits, . _ or -');
    // "hub" names the hub's own devices in backoffs and the dashboard's picture: a node may not take it.
    if (name.toLowerCase() === 'hub') throw new RelayError(ErrorCode.INVALID_REQUEST, 'a node may not be named "hub" (the hub\'s own name); choose another --name');
    const check = checkJoinToken(this.deps.secret, token);
    if (!check.ok) throw new RelayError(ErrorCode.NODE_AUTH, `join refused: ${check.why}`);
    const credential = newCredential();
    await this.deps.store.update((data) => {
      data.used_join_tokens ??= [];
      if (data.used_join_tokens.includes(check.id)) throw new RelayError(ErrorCode.NODE_AUTH, 'join refused: the token was already used');
      const existing = data.nodes.find((n) => n.name === name);
      if (existing && !existing.revoked_at) throw new RelayError(ErrorCode.MODEL_EXISTS, `a node named "${name}" is already joined; revoke it first or choose another --name`);
      data.used_join_tokens.push(check.id);
      data.nodes = data.nodes.filter((n) => n.name !== name);
      data.nodes.push({ name, credential_sha256: credentialHash(credential), created_at: new Date().toISOString(), revoked_at: null, last_seen: null });
    });
    this.deps.log.info({ node: name }, 'node joined');
    return { name, credential };
  }

  // ---- node caches ----

  /**
   * A copy in a node's cache of a file no registered model has (the model was removed, perhaps while the node
   * was away) is evicted, and so is a partial push of one: nodes never serve what the hub no longer owns, and the
   * disk comes back. Called when a node connects and when a model is removed. Returns the nodes told to evict.
   */
  async evictUnregistered(conn?: NodeConn): Promise<string[]> {
    const told: string[] = [];
    await Promise.all(
      (conn ? [conn] : this.connected()).map(async (c) => {
        // Its partial pushes too (reported at hello): a push of a model removed since will never resume.
        for (const sha256 of [...new Set([...c.cache.keys(), ...c.partials.splice(0)])]) {
          // Read the registry afresh for each file: a model registered while earlier evictions ran is kept.
          if (this.deps.store.data.models.some((m) => usesFile(m, sha256))) continue;
          c.cache.delete(sha256);
          told.push(c.name);
          try {
            const r = await c.command({ type: 'evict', sha256 }, 30_000);
            this.deps.log.info({ node: c.name, sha256, removed: (r.data as { removed?: boolean } | undefined)?.removed }, "evicted a file no registered model uses from the node's cache");
          } catch (err) {
            this.deps.log.warn({ node: c.name, sha256, err: (err as Error).message }, "could not evict a removed model from the node's cache");
          }
        }
      }),
    );
    return told;
  }

  async revoke(name: string): Promise<void> {
    await this.deps.store.update((data) => {
      const n = data.nodes.find((x) => x.name === name);
      if (!n) throw new RelayError(ErrorCode.NODE_NOT_FOUND, `no node named "${name}"`);
      n.revoked_at = new Date().toISOString();
      delete n.refused;
    });
    const c = this.conns.get(name);
    if (c) {
      c.close('revoked by the hub owner');
      c.session.destroy(new RelayError(ErrorCode.NODE_AUTH, 'revoked'));
    }
    this.deps.log.warn({ node: name }, 'node revoked');
  }

  /** The node a request comes from, by its name and credential headers; NODE_AUTH when either is wrong or it was revoked. */
  authenticate(req: IncomingMessage): NodeRecord {
    const name = req.headers['x-relay-node'];
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    const rec = typeof name === 'string' ? this.records().find((n) => n.name === name) : undefined;
    if (!m || !rec || rec.credential_sha256 !== credentialHash(m[1]!)) throw new RelayError(ErrorCode.NODE_AUTH, 'unknown node or wrong credential');
    if (rec.revoked_at) throw new RelayError(ErrorCode.NODE_AUTH, `node "${rec.name}" was revoked`);
    return rec;
  }

  private setRefusal(name: string, refused: NodeRecord['refused']): Promise<void> {
    return this.deps.store.update((data) => {
      const r = data.nodes.find((n) => n.name === name);
      if (!r) return;
      if (refused) r.refused = refused;
      else delete r.refused;
    });
  }

  /** Take over WebSocket upgrades on /tunnel; everything is refused before any stream opens. */
  attach(server: Server): void {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const refuse = (status: number, code: string, message: string): void => {
        const body = JSON.stringify({ error: { code, message } });
        socket.end(
          `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Upgrade Required'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
        );
      };
      if (new URL(req.url ?? '/', 'http://x').pathname !== TUNNEL_PATH) return refuse(404, 'not_found', 'no such endpoint');
      const offered = (req.headers['sec-websocket-protocol'] ?? '')
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      if (relayProtocol(offered) === null) {
        return refuse(426, 'version_mismatch', `this hub speaks ${WS_SUBPROTOCOL}; the node offered ${offered.join(', ') || 'nothing'}`);
      }
      let rec: NodeRecord;
      try {
        rec = this.authenticate(req);
      } catch (err) {
        this.deps.log.warn({ node: req.headers['x-relay-node'], why: (err as Error).message }, 'node refused');
        return refuse(401, 'node_auth', (err as Error).message);
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => void this.onConnection(ws, rec.name));
    });
  }

  private async onConnection(ws: WebSocket, name: string): Promise<void> {
    const log = this.deps.log.child({ node: name });
    // Nodes open one stream (control); the hub opens the rest. 1024 streams and 1024 queued control frames bound
    // what one node can make the hub hold.
    const session = new Session(webSocketDuplex(ws), {
      client: false,
      ...TUNNEL_KEEPALIVE,
      streamWindow: TUNNEL_STREAM_WINDOW,
      maxStreams: 1024,
      maxControlFrames: 1024,
      priorityLevels: TUNNEL_PRIORITY_LEVELS,
    });
    const first = await new Promise<YamuxStream | null>((resolve) => {
      const t = setTimeout(() => resolve(null), this.deps.helloTimeoutMs ?? 10_000);
      session.once('stream', (st: YamuxStream) => {
        clearTimeout(t);
        resolve(st);
      });
      session.once('close', () => resolve(null));
    });
    if (!first) {
      log.warn('no control stream in time: closing');
      session.destroy();
      return;
    }
    const header = await acceptStream(first).catch(() => null);
    if (header?.kind !== 'control') {
      session.destroy(new RelayError(ErrorCode.TUNNEL_PROTOCOL, 'the first stream must be control'));
      return;
    }
    const control = new ControlChannel<NodeToHub, HubToNode>(first, parseNodeMessage);
    const hello = await new Promise<Hello | null>((resolve) => {
      const t = setTimeout(() => resolve(null), this.deps.helloTimeoutMs ?? 10_000);
      control.once('message', (m: NodeToHub) => {
        clearTimeout(t);
        resolve(m.type === 'hello' ? m : null);
      });
      control.once('close', () => resolve(null));
    });
    if (!hello) {
      control.send({ type: 'error', code: 'bad_hello', message: 'expected a hello message first' });
      session.close();
      return;
    }
    const refused = refusal({ protocol: PROTOCOL_VERSION, llama: this.deps.llamaVersion, relay: this.deps.hubVersion }, hello);
    if (refused) {
      // Kept in the store (the dashboard shows it after a restart too) until the node connects or is revoked.
      await this.setRefusal(name, refusalRecord(refused, new Date().toISOString()));
      log.warn({ refused: refused.message }, 'node refused for its version');
      control.send({ type: 'error', code: wireCode(ErrorCode.VERSION_MISMATCH), message: refused.message });
      session.close();
      return;
    }
    if (hello.node !== name) {
      control.send({ type: 'error', code: 'bad_hello', message: `hello names "${hello.node}" but the credential is for "${name}"` });
      session.close();
      return;
    }
    // One agent per credential: a second one is refused while the first answers a ping (two agents with one
    // credential would otherwise evict each other in a loop); a first one that is gone (half-open) is replaced.
    const prev = this.conns.get(name);
    if (prev?.alive) {
      const answers = await prev.session.ping(2000).then(
        () => true,
        () => false,
      );
      if (answers && prev.alive) {
        log.warn("a second agent presented this node's credential while the first is connected: refused");
        control.send({
          type: 'error',
          code: wireCode(ErrorCode.NODE_IN_USE),
          message: `node "${name}" is already connected from another process (one agent per credential: stop the other one first)`,
        });
        session.close();
        return;
      }
    }
    if (prev) prev.session.destroy(new RelayError(ErrorCode.SESSION_CLOSED, 'replaced by a new connection from the same node'));

    const conn = new NodeConn(name, session, control, hello);
    this.conns.set(name, conn);
    if (this.records().find((r) => r.name === name)?.refused) void this.setRefusal(name, undefined);
    // The control stream is the session: when it ends (closed by the node, or cut off for not reading or for
    // flooding), so does everything else the node had open.
    control.once('close', (err: Error) => session.destroy(err));
    control.send({ type: 'welcome', protocol: PROTOCOL_VERSION, hub: this.deps.hubVersion });
    void this.evictUnregistered(conn);
    log.info({ devices: hello.devices.map((d) => `${d.id}:${d.freeMb}/${d.totalMb}MB`), availability: hello.availability, replicas: hello.replicas.length }, 'node connected');
    void this.deps.store.update((data) => {
      const r = data.nodes.find((n) => n.name === name);
      if (r) r.last_seen = new Date().toISOString();
    });

    control.on('message', (m: NodeToHub) => {
      conn.lastSeen = Date.now();
      if (m.type === 'heartbeat') {
        conn.devices = m.devices;
        conn.devicesAt = Date.now();
        conn.replicas = m.replicas;
        conn.rpcs = m.rpcs ?? [];
        conn.schedule = m.schedule ?? conn.schedule;
        conn.cache = new Map(m.cache.map((f: CachedFile) => [f.sha256, f.size]));
        this.setAvailability(conn, m.availability, m.reason);
        conn.emit('heartbeat');
      } else if (m.type === 'availability') {
        this.setAvailability(conn, m.availability, m.reason);
      } else if (m.type === 'error') {
        log.warn({ code: m.code, message: m.message }, 'node reported an error');
      }
    });
    session.on('stream', (st: YamuxStream) => {
      // Nodes do not open streams besides control: refuse them.
      st.destroy();
    });
    session.once('close', (err: Error) => {
      if (this.conns.get(name) === conn) this.conns.delete(name);
      log.info({ why: err.message }, 'node disconnected');
      conn.emit('lost', err);
      this.emit('lost', conn, err);
    });
    this.emit('connected', conn);
  }

  private setAvailability(conn: NodeConn, a: Availability, reason: string | null): void {
    const was = conn.availability;
    conn.availability = a;
    conn.reason = reason;
    if (was !== a) {
      // idle ↔ busy flips with every request: debug; pausing and resuming matter to the owner: info.
      const level = a === 'paused' || was === 'paused' ? 'info' : 'debug';
      this.deps.log[level]({ node: conn.name, availability: a, reason }, 'node availability');
      this.emit('availability', conn, was);
    }
  }

  get(name: string): NodeConn | undefined {
    return this.conns.get(name);
  }

  connected(): NodeConn[] {
    return [...this.conns.values()].filter((c) => c.alive);
  }

  status(): NodeStatus[] {
    return this.records().map((r) => nodeStatus(r, this.conns.get(r.name)));
  }

  close(): void {
    for (const c of this.conns.values()) c.session.close();
    this.wss.close();
  }
}
