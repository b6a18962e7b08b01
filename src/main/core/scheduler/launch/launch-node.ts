import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../../shared/errors.js';
import type { HubConfig } from '../../config.js';
import { cachedIn, modelFiles } from '../../models/files.js';
import type { NodeManager } from '../../pool/manager.js';
import type { ModelRecord } from '../../store/store.js';
import { STOP_REPLICA_WAIT_MS } from '../../timeouts.js';
import { poolingFor, settingsFor } from '../decide/model-settings.js';
import type { Placement, Running } from '../placements/placement.js';
import { describeNeed } from '../decide/plan.js';
import { NODE_REPLY_MARGIN_MS } from '../decide/deadline.js';
import { launchError, slotLayout } from './launch-host.js';
import { asLiveness, type Liveness } from '../../llama/liveness.js';
import type { KeptFile, SlotKeeper, SlotLayout } from '../slots/slot-keep.js';
import { slotTokens, type AnswerRecords, type SlotTokens } from '../slots/answer-records.js';
import { fetchIdleSlotTokens, fetchSlot, putSlot, savedSlots, slotsTooLarge, SLOT_CARRY_TIMEOUT_MS, START_RESTORE_WAIT_MS, TAKE_IN_WAIT_MS } from '../slots/slot-carry.js';
import type { NodeConn } from '../../pool/conn.js';
import type { SavedSlot } from '../../../../shared/protocol.js';

/** A node's answer to check: its /health probe takes up to 3 s, a busy link a little more. */
export const CHECK_WAIT_MS = 8000;

/**
 * Node replicas: the model is pushed when the node lacks a file of it, then started by a `start-replica`
 * command carrying the load's deadline; requests reach it as http streams through the node's tunnel. The node
 * owns the process and holds it from its spawn: a stop-replica while it loads kills it, and is answered once it
 * has exited. A stop during the push means no start-replica is sent at all. Conversations are kept like a host
 * replica's (slot-keep.ts): the node saves its slots as it stops the replica — whoever stops it: the hub, its owner's
 * pause —, the hub fetches them into its store, and a node replica's start sends the model's kept state back into
 * its slots before its first request (slot-carry.ts).
 */
export class NodeLauncher {
  /** Starts in flight, and whether a stop came meanwhile. */
  private readonly starting = new Map<string, { stopped: boolean }>();
  /** Running replicas whose slots are kept when they stop: the model and the layout its state fits. */
  private readonly keeping = new Map<string, { model: string; layout: SlotLayout }>();

  constructor(private readonly deps: { config: HubConfig; nodes: NodeManager; log: Logger; slots: SlotKeeper; records: AnswerRecords }) {}

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    const conn = p.node!;
    const c = settingsFor(this.deps.config, model);
    const log = this.deps.log.child({ placement: p.id, model: model.name, node: conn.name });
    const me = { stopped: false };
    this.starting.set(p.id, me);
    try {
      if (!cachedIn(conn.cache, model)) await this.deps.nodes.push(conn, model);
      if (me.stopped) throw new RelayError(ErrorCode.REPLICA_FAILED, 'stopped while its weights were pushed');
      log.info({ device: p.device, need: describeNeed(model.name, p.fit), deadline_s: Math.round(p.deadlineMs / 1000) }, 'starting node replica');
      const files = modelFiles(model);
      const layout = slotLayout(this.deps.slots, this.deps.config, model, p);
      p.loadingSince = Date.now();
      const reply = await conn.command(
        {
          type: 'start-replica',
          replica: p.id,
          sha256: model.sha256,
          ...(files.length > 1 ? { parts: files.map((f) => f.sha256) } : {}),
          ctx: p.fit.ctx,
          slots: p.fit.slots,
          cacheType: c.kvCacheType,
          flashAttn: c.flashAttn ?? null,
          embedding: model.embedding,
          ...(model.reranker ? { reranking: true } : {}),
          ...(model.mmproj ? { mmproj: model.mmproj.sha256 } : {}),
          ...(model.draft && p.spec.type === 'draft-simple' ? { draft: { sha256: model.draft.sha256, max: model.draft.max, min: model.draft.min } } : {}),
          ...(p.spec.type && p.spec.type !== 'draft-simple' ? { specType: p.spec.type } : {}),
          pooling: poolingFor(model),
          ...(model.settings?.max_tokens ? { nPredict: model.settings.max_tokens } : {}),
          alias: model.name,
          device: p.device,
          loadTimeoutMs: p.deadlineMs,
          ...(layout ? { keepSlotsBytes: this.deps.config.slotKeepMb * 1048576, ...(layout.bytesPerToken ? { slotBytesPerToken: Math.ceil(layout.bytesPerToken) } : {}) } : {}),
        },
        p.deadlineMs + NODE_REPLY_MARGIN_MS,
      );
      const pid = typeof reply.data?.pid === 'number' ? reply.data.pid : null;
      if (layout) this.keeping.set(p.id, { model: model.name, layout });
      // The conversations the model's last replica held (here, on the hub or another node), sent into its slots.
      const put = (f: KeptFile): Promise<void> => putSlot(conn, p.id, f.slot, this.deps.slots.path(f.file), f.bytes, f.sha256);
      const restored = layout ? await this.deps.slots.restoreWith(model.name, layout, conn.name, put, START_RESTORE_WAIT_MS) : null;
      // Running, with one slot: an answer that moves here takes its kept state in (its lease holds that slot).
      const takeIn = layout?.slots === 1 ? (from: string) => this.deps.slots.restoreWith(model.name, layout, conn.name, put, TAKE_IN_WAIT_MS, from) : undefined;
      return {
        baseUrl: `http://${conn.name}.node.relay`,
        connect: () => conn.open({ kind: 'http', replica: p.id }),
        port: null,
        pid,
        buffers: [],
        exited: null,
        tail: () => '',
        restored,
        ...(takeIn ? { takeIn } : {}),
      };
    } catch (err) {
      if (isRelayError(err) && (err.code === ErrorCode.MODEL_UNAVAILABLE || err.code === ErrorCode.NODE_LOST)) throw err;
      throw launchError(err, `could not start a replica of "${model.name}" on node ${conn.name}`, { model: model.name, node: conn.name });
    } finally {
      this.starting.delete(p.id);
    }
  }

  /** Its idle slots' tokens into its record, asked of the node (an answer just yielded one; Launcher.recordSlots). */
  recordSlots(p: Placement): Promise<void> {
    if (!p.node?.alive || !this.keeping.has(p.id)) return Promise.resolve();
    const tokens = fetchIdleSlotTokens(p.node, p.id, p.leases.size);
    this.deps.records.expect(p.id, tokens);
    return tokens.then(() => undefined);
  }

  /** The node's own answer on its replica's llama-server (its process state, its /health on loopback). */
  async check(p: Placement): Promise<Liveness> {
    if (!p.node?.alive) return 'gone';
    const r = await p.node.command({ type: 'check', replica: p.id }, CHECK_WAIT_MS);
    return asLiveness(r.data?.liveness);
  }

  /**
   * Stops the replica, loading or ready; resolves once the node says its process has exited. The slots the node kept
   * as it stopped are fetched into the hub's store after (`kept` settles true once they are held there); the model's
   * next replica on that node waits for them before its restore, and the answers that moved off it for their record.
   */
  async stop(p: Placement): Promise<{ readonly kept: Promise<boolean> } | void> {
    const start = this.starting.get(p.id);
    if (start) start.stopped = true;
    const keeping = this.keeping.get(p.id);
    this.keeping.delete(p.id);
    if (!p.node?.alive) return;
    const node = p.node;
    const stopped = node.command({ type: 'stop-replica', replica: p.id }, STOP_REPLICA_WAIT_MS).catch(() => null);
    if (!keeping) return void (await stopped);
    const saved = stopped.then((r) => savedSlots(r?.data?.slots));
    // Fetched after the stop has ended (its memory is free).
    const tokens: SlotTokens[] = [];
    const kept = saved.then((s) => this.fetchKept(node, p.id, keeping, s, tokens));
    this.deps.slots.expect(keeping.model, kept);
    this.deps.records.expect(
      p.id,
      kept.then(() => tokens),
    );
    await saved;
    return { kept };
  }

  /**
   * The slots a stopped replica's node kept, into the hub's store (all or none, within one deadline), their token
   * lists read into `tokens`. Each size the node gave is checked before a byte is fetched, and room is made for
   * them all first: the store never holds more than RELAY_SLOT_KEEP_MB, fetches under way included.
   */
  private async fetchKept(node: NodeConn, replica: string, keeping: { model: string; layout: SlotLayout }, saved: SavedSlot[], tokens: SlotTokens[]): Promise<boolean> {
    if (saved.length === 0) return false;
    const files: KeptFile[] = [];
    const deadline = Date.now() + SLOT_CARRY_TIMEOUT_MS;
    try {
      const why = slotsTooLarge(saved, keeping.layout, this.deps.slots.budgetBytes);
      if (why) throw new Error(why);
      this.deps.slots.makeRoom(saved.reduce((n, s) => n + s.bytes, 0));
      for (const s of saved) {
        const file = `${replica}-${s.slot}.bin`;
        await fetchSlot(node, replica, s, this.deps.slots.path(file), deadline - Date.now());
        files.push({ slot: s.slot, file, bytes: s.bytes, sha256: s.sha256 });
      }
      tokens.push(...(await slotTokens(this.deps.slots, files)));
    } catch (err) {
      this.deps.log.warn({ placement: replica, model: keeping.model, message: (err as Error).message }, "could not fetch a stopped node replica's slots: its conversations start cold");
      this.deps.slots.discardFiles(files);
      return false;
    }
    return this.deps.slots.adopt(keeping.model, replica, keeping.layout, files, node.name);
  }
}
