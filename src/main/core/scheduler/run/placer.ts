import type { Logger } from 'pino';
import { LENDS_NOTHING } from '../../llama/doctor.js';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { HubConfig } from '../../config.js';
import type { Device } from '../../gpu/inventory.js';
import type { NodeConn, NodeManager } from '../../pool/manager.js';
import type { ModelRecord } from '../../store/store.js';
import { HUB, type FailureMemory } from '../decide/backoff.js';
import { fitNeed, fmtMb, type FitBreakdown } from '../decide/fit.js';
import type { NewPlacement, Placement } from '../placements/placement.js';
import { chooseEvictions, freeAfterReservations, planHostReplica, shortfallMessage, type HostPlan, type Reservation } from '../decide/plan.js';
import { planShard, shardModel, type ShardDevice, type ShardPlan } from '../decide/shard.js';
import { settingsFor } from '../decide/model-settings.js';
import { cachedIn } from '../../models/files.js';
import { whyNotLine } from '../decide/why-not.js';
import { hiddenBytes, hopMs, wantsReplan, type DeviceHardware } from '../decide/speed.js';
import { SpeedBook } from './speeds.js';
import type { ReplanStatus } from '../../../../shared/status.js';

export interface PlacerDeps {
  readonly config: HubConfig;
  readonly devices: () => Device[];
  readonly nodes?: NodeManager;
  readonly failures: FailureMemory;
  readonly placements: () => Iterable<Placement>;
  /** Each model's last failed placement (its failure's output tail: a load that failed for the scores' memory). */
  readonly failed?: () => Iterable<Placement>;
  /** The hub's own devices are paused (its owner's toggle, schedule or auto-pause). */
  readonly hubPaused: () => boolean;
  readonly log: Logger;
}

/** "What if" switches: plan as if these placements were stopped, paused machines back, backoffs over. */
interface WhatIf {
  readonly evicting?: ReadonlySet<string>;
  readonly ignorePause?: boolean;
  /** Machines (HUB or a node's name) planned as if they were not paused. */
  readonly resume?: ReadonlySet<string>;
  readonly ignoreBackoff?: boolean;
}

export { HUB } from '../decide/backoff.js';

/** A node's devices for the pure planner, each dated by the hub's clock (see DeviceInfo.ageMs). */
function nodeDevices(conn: NodeConn) {
  return conn.devices.map((dv) => ({ id: dv.id, kind: dv.kind, totalMb: dv.totalMb, reportedFreeMb: dv.freeMb, readAt: conn.devicesAt - (dv.ageMs ?? 0), memGBps: dv.memGBps }));
}

/** llama-server's word that `--flash-attn auto` resolved to off where the model loaded (launch-host.ts loadReport). */
const FLASH_ATTN_OFF = /Flash Attention not supported/;

/**
 * Where a new placement of a model goes, in the spec's order, as a plan the scheduler then carries out:
 *   1. a replica on the hub's own device;
 *   2. a replica on a node that fits (a node that already holds the file first);
 *   3. a pipeline shard across hub + nodes (only as a model's first placement);
 *   4. with the room of the fewest least-recently-used idle placements counted free — only when that plan
 *      succeeds, so a request that cannot be placed stops nobody's model.
 * And when nothing fits: whether the pool as configured could never hold it (model_unavailable) or could once
 * busy placements finish, paused machines return or backoffs expire (pool_busy).
 */
export class Placer {
  /** Each device's measured speed (run/speeds.ts): the shard planner's ms per layer. */
  readonly speeds = new SpeedBook();
  /** Models whose `auto` flash attention a load resolved to off: their fit counts the attention scores from then on. */
  private readonly noFlashAttn = new Set<string>();

  constructor(private readonly deps: PlacerDeps) {}

  /** The model's settings for the fit, with what its loads said `--flash-attn auto` resolves to. */
  private fitSettings(model: ModelRecord): HubConfig & { autoFlashAttn: boolean } {
    if (!this.noFlashAttn.has(model.name)) {
      const said = (p: Placement): string[] => [...(p.running?.buffers ?? []), p.failure?.tail ?? ''];
      const off = [...this.deps.placements(), ...(this.deps.failed?.() ?? [])].find((p) => p.model === model.name && said(p).some((l) => FLASH_ATTN_OFF.test(l)));
      if (off) {
        this.noFlashAttn.add(model.name);
        this.deps.log.warn({ model: model.name, placement: off.id }, 'flash attention "auto" resolved to off where it loaded: its fit now counts the attention scores');
      }
    }
    return { ...settingsFor(this.deps.config, model), autoFlashAttn: !this.noFlashAttn.has(model.name) };
  }

  need(model: ModelRecord): FitBreakdown {
    const need = fitNeed(
      {
        requiredVramMb: model.required_vram_mb,
        sizeBytes: model.size,
        kvBytesPerToken: model.kv_bytes_per_token,
        memory: model.memory,
        projectorBytes: model.mmproj?.size,
        draft: model.draft ? { sizeBytes: model.draft.size, kvBytesPerToken: model.draft.kv_bytes_per_token, memory: model.draft.memory } : undefined,
      },
      this.fitSettings(model),
    );
    this.deps.log.debug({ model: model.name, fit: need }, 'fit-check');
    return need;
  }

  /** Placements as the pure planner sees them, on one machine: the hub (node null) or a node by name. */
  views(node: string | null, evicting?: ReadonlySet<string>): Reservation[] {
    const out: Reservation[] = [];
    for (const p of this.deps.placements()) {
      if (p.state === 'failed') continue;
      const base = { id: p.id, model: p.model, state: p.state, inFlight: p.inFlight, lastUsedAt: p.lastUsedAt, readyAt: p.readyAt, evict: evicting?.has(p.id) ?? false };
      if (p.shardPlan) {
        for (const st of p.shardPlan.stages) if (st.node === node) out.push({ ...base, device: st.device, needMb: st.needMb });
      } else if ((p.node?.name ?? null) === node) {
        out.push({ ...base, device: p.device, needMb: p.fit.needMb });
      }
    }
    return out;
  }

  private hubDevices(w: WhatIf): Device[] {
    if (this.deps.hubPaused() && !w.ignorePause && !w.resume?.has(HUB)) return [];
    return this.deps.devices();
  }

  private usable(conn: NodeConn, model: string, w: WhatIf): boolean {
    if (conn.availability === 'paused' && !w.ignorePause && !w.resume?.has(conn.name)) return false;
    return w.ignoreBackoff || !this.deps.failures.blocked(conn.name, model);
  }

  private hubUsable(model: string, w: WhatIf): boolean {
    return w.ignoreBackoff || !this.deps.failures.blocked(HUB, model);
  }

  private planHost(model: ModelRecord, w: WhatIf): Extract<HostPlan, { kind: 'host' }> | null {
    if (!this.hubUsable(model.name, w)) return null;
    const plan = planHostReplica(this.need(model), freeAfterReservations(this.hubDevices(w), this.views(null, w.evicting)), []);
    return plan.kind === 'host' ? plan : null;
  }

  /** Among usable nodes, one whose device fits M: a node that already holds the file first, then the most free. */
  private planNode(model: ModelRecord, w: WhatIf): { conn: NodeConn; device: string } | null {
    const need = this.need(model);
    let best: { conn: NodeConn; device: string; cached: boolean; free: number } | null = null;
    for (const conn of this.deps.nodes?.connected() ?? []) {
      if (!this.usable(conn, model.name, w)) continue;
      const devices = nodeDevices(conn);
      const plan = planHostReplica(need, freeAfterReservations(devices, this.views(conn.name, w.evicting)), []);
      if (plan.kind !== 'host') continue;
      const free = devices.find((dv) => dv.id === plan.device)!.reportedFreeMb;
      const cached = cachedIn(conn.cache, model);
      if (!best || (cached && !best.cached) || (cached === best.cached && free > best.free)) best = { conn, device: plan.device, cached, free };
    }
    return best ? { conn: best.conn, device: best.device } : null;
  }

  /** The hub's device plus usable nodes' devices, with what each has free. */
  private planShardFor(model: ModelRecord, w: WhatIf): ShardPlan {
    const sm = shardModel(model);
    if (!sm) return { kind: 'none', reason: 'the GGUF header gives no layer count to split' };
    // Each device with its measured (or default) ms per layer of this model; each node's hop from its link.
    // (freeAfterReservations keeps the order of the devices it is given: `hw[i]` is `dv`'s hardware.)
    const speed = (machine: string, dv: { id: string }, hw: DeviceHardware) => ({ msPerLayer: this.speeds.layerMs(machine, dv.id, hw, model)?.ms ?? 1 });
    const hub = this.hubUsable(model.name, w) ? this.hubDevices(w) : [];
    const devices: ShardDevice[] = freeAfterReservations(hub, this.views(null, w.evicting)).map((dv, i) => ({
      node: null,
      device: dv.id,
      kind: dv.kind,
      freeMb: dv.freeMb,
      totalMb: dv.totalMb,
      ...speed(HUB, dv, hub[i]!),
    }));
    for (const conn of this.deps.nodes?.connected() ?? []) {
      if (!this.usable(conn, model.name, w)) continue;
      const hw = nodeDevices(conn);
      const free = freeAfterReservations(hw, this.views(conn.name, w.evicting));
      const hop = hopMs(conn.link(), hiddenBytes(model.embedding_length));
      free.forEach((dv, i) => devices.push({ node: conn.name, device: dv.id, kind: dv.kind, freeMb: dv.freeMb, totalMb: dv.totalMb, ...speed(conn.name, dv, hw[i]!), hopMs: hop }));
    }
    return planShard(devices, sm, this.fitSettings(model), { by: this.deps.config.shardPlan });
  }

  /**
   * A running shard whose measured ms/token is off its prediction by more than the threshold: the plan its next
   * cold start would take with what is measured now, when that differs from the running one; else null.
   */
  replan(model: ModelRecord, p: Placement): ReplanStatus | null {
    const running = p.shardPlan;
    const measured = p.plainMsPerToken;
    if (!running || p.state !== 'ready' || !wantsReplan(running.predictedMsPerToken, measured)) return null;
    const next = this.planShardFor(model, { evicting: new Set([p.id]) });
    if (next.kind !== 'shard') return null;
    const key = (st: { node: string | null; device: string; layers: readonly [number, number] }) => `${st.node}/${st.device}/${st.layers.join('-')}`;
    if (next.stages.map(key).join() === running.stages.map(key).join()) return null;
    const off = Math.round((100 * (measured! - running.predictedMsPerToken!)) / running.predictedMsPerToken!);
    return {
      reason: `measured ${measured!.toFixed(1)} ms/token, predicted ${running.predictedMsPerToken!.toFixed(1)} (${off > 0 ? '+' : ''}${off}%): its next cold start takes this plan`,
      predicted_ms_per_token: Math.round((next.predictedMsPerToken ?? 0) * 100) / 100,
      stages: next.stages.map((st) => ({ node: st.node, device: st.device, layers: st.layers })),
    };
  }

  /** One try in the spec's order with the given what-ifs; no evictions beyond `w.evicting`. */
  private tryPlan(model: ModelRecord, w: WhatIf, shards: boolean): NewPlacement | null {
    const evict = [...(w.evicting ?? [])];
    const host = this.planHost(model, w);
    if (host) return { kind: 'host', device: host.device, evict };
    const node = this.planNode(model, w);
    if (node) return { kind: 'node', conn: node.conn, device: node.device, evict };
    if (!shards) return null;
    const shard = this.planShardFor(model, w);
    return shard.kind === 'shard' ? { kind: 'shard', plan: shard, evict } : null;
  }

  /**
   * A new placement for M, or null. `first`: M has no live placement, so a shard may be planned and idle
   * placements of other models may be evicted (the fewest, least recently used first, among those `mayEvict`
   * allows, and only when that makes the plan succeed). Extra placements for a busy model use free room only: they
   * never cost anyone a model.
   */
  place(model: ModelRecord, first: boolean, mayEvict: (p: Placement) => boolean = () => true): NewPlacement | null {
    const plain = this.tryPlan(model, {}, first);
    if (plain || !first) return plain;
    const idle = [...this.deps.placements()].filter((p) => p.state === 'ready' && p.inFlight === 0 && mayEvict(p));
    const victims = chooseEvictions(idle, (ev) => this.tryPlan(model, { evicting: ev }, true) !== null);
    return victims ? this.tryPlan(model, { evicting: new Set(victims.map((v) => v.id)) }, true) : null;
  }

  /**
   * Nothing fits now: could M fit once every placement is gone, paused machines are back and backoffs are over?
   * Then the pool is busy (retry later); otherwise the pool as configured cannot hold M.
   */
  couldFitLater(model: ModelRecord): boolean {
    const all = new Set([...this.deps.placements()].filter((p) => p.state !== 'failed').map((p) => p.id));
    return this.tryPlan(model, { evicting: all, ignorePause: true, ignoreBackoff: true }, true) !== null;
  }

  /** Whether M could be placed now (for /v1/models and /status). */
  canPlaceNow(model: ModelRecord): boolean {
    return this.place(model, true) !== null;
  }

  /** Why `model` cannot be placed now: pool_busy (429/503 with Retry-After) when it would fit later, else model_unavailable. */
  refusal(model: ModelRecord): RelayError {
    const message = this.shortfall(model);
    const needMb = Math.ceil(this.need(model).needMb);
    if (this.couldFitLater(model)) {
      return new RelayError(ErrorCode.POOL_BUSY, `"${model.name}" fits once busy placements finish, paused machines return or backoffs expire: ${message}`, {
        model: model.name,
        need_mb: needMb,
        why_not: this.whyNot(model),
        retry_after_s: 10,
      });
    }
    return new RelayError(ErrorCode.MODEL_UNAVAILABLE, message, { model: model.name, need_mb: needMb, why_not: this.whyNot(model) });
  }

  /** The 503 message: need vs free per device on the hub and on every node. */
  shortfall(model: ModelRecord): string {
    const plan = planHostReplica(this.need(model), freeAfterReservations(this.hubDevices({}), this.views(null)), []);
    const hub = plan.kind === 'none' ? shortfallMessage(model.name, plan) : `${model.name}: the hub's device fits it`;
    const paused = this.deps.hubPaused() ? " (the hub's own devices are paused)" : '';
    return `${hub}${paused}; ${this.nodesSummary(model.name)}`;
  }

  /** The one-line "why not" beside the 503's long message: need vs the largest free room, then what would make room. */
  whyNot(model: ModelRecord): string {
    const fits = (w: WhatIf): boolean => this.tryPlan(model, w, true) !== null;
    const hub = this.deps.hubPaused() ? [] : freeAfterReservations(this.hubDevices({}), this.views(null)).map((dv) => ({ machine: HUB, device: dv.id, freeMb: dv.freeMb }));
    const conns = this.deps.nodes?.connected() ?? [];
    const nodes = conns
      .filter((c) => c.availability !== 'paused')
      .flatMap((c) => freeAfterReservations(nodeDevices(c), this.views(c.name)).map((dv) => ({ machine: c.name, device: dv.id, freeMb: dv.freeMb })));
    const largest = [...hub, ...nodes].reduce<(typeof hub)[number] | null>((a, r) => (a && a.freeMb >= r.freeMb ? a : r), null);
    const paused = [
      ...(this.deps.hubPaused() ? [{ machine: HUB, reason: "the hub's devices are paused" as string | null }] : []),
      ...conns.filter((c) => c.availability === 'paused').map((c) => ({ machine: c.name, reason: c.reason })),
    ];
    const blocked = [HUB, ...conns.map((c) => c.name)].flatMap((m) => {
      const b = this.deps.failures.blocked(m, model.name);
      return b ? [{ machine: m, until: b.until }] : [];
    });
    const all = new Set([...this.deps.placements()].filter((p) => p.state !== 'failed').map((p) => p.id));
    return whyNotLine({
      needMb: this.need(model).needMb,
      largest,
      resumeOne: paused.filter((m) => fits({ resume: new Set([m.machine]) })),
      resumeAll: paused.length > 1 && fits({ ignorePause: true }),
      backedOff: blocked.length > 0 && fits({ ignoreBackoff: true }) ? blocked : [],
      onceIdle: fits({ evicting: all }),
    });
  }

  private nodesSummary(model: string): string {
    const records = (this.deps.nodes?.records() ?? []).filter((r) => !r.revoked_at);
    if (records.length === 0) return 'no node has joined (relay nodes token, then relay up on another machine)';
    return `nodes: ${records
      .map((r) => {
        const conn = this.deps.nodes?.get(r.name);
        if (!conn?.alive) return `${r.name} offline`;
        if (conn.availability === 'paused') return `${conn.name} paused (${conn.reason ?? 'by its owner'})`;
        const b = this.deps.failures.blocked(conn.name, model);
        const free = freeAfterReservations(nodeDevices(conn), this.views(conn.name));
        const devs =
          free.map((dv) => `${dv.id} ${fmtMb(dv.freeMb)} free of ${fmtMb(dv.totalMb)}`).join(', ') ||
          `lends nothing (${LENDS_NOTHING}: start it with relay up --cpu-budget-mb N to serve from its CPU)`;
        return `${conn.name} ${devs}${b ? ` (skipped for "${model}" until ${new Date(b.until).toISOString()}: ${b.reason})` : ''}`;
      })
      .join('; ')}`;
  }
}
