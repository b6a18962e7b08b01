import type { DeviceSpeedStatus } from '../../../../shared/status.js';
import type { ModelRecord, StoredSpeed } from '../../store/store.js';
import { defaultMsPerGib, layerMs, observeDevice, stageTimes, type DeviceHardware, type DeviceSpeed, type LayerModel, type SpeedSource } from '../decide/speed.js';
import { shardModel, type Stage } from '../decide/shard.js';
import { HUB } from '../decide/backoff.js';
import type { Launcher } from '../launch/launcher.js';
import type { NodeManager } from '../../pool/manager.js';
import type { LeaseReport, Placement } from '../placements/placement.js';
import type { SpecTallies } from './spec-tally.js';
import { nextMsPerToken } from '../decide/routing.js';

/** One remote stage of a shard as the hub waited on it: its bridge's median round trip and the node's link round trip. */
export interface StageWait {
  readonly waitMs: number | null;
  readonly rttMs: number | null;
}

/**
 * Every device's measured speed, keyed by machine (HUB or a node's name) and device id: fed by each answer's
 * generation timings (a replica: its whole model on one device; a shard: split by stage from the hub's waits on
 * each remote stage), read by the shard planner. The hub keeps it in its store across restarts (hub/state/speeds-store.ts).
 * Answers that drafted tokens are not counted: speculation is not the device's speed.
 */
export class SpeedBook {
  private readonly byDevice = new Map<string, DeviceSpeed>();
  /** Called after each change (the hub writes the book to its store: hub/state/speeds-store.ts). */
  onChange: () => void = () => undefined;

  constructor(private readonly now: () => number = () => Date.now()) {}

  /** What the store kept: entries whose numbers are not positive and finite are dropped, not trusted. */
  restore(entries: readonly StoredSpeed[]): void {
    const ok = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;
    for (const e of entries) {
      if (typeof e?.machine !== 'string' || typeof e.device !== 'string' || !ok(e.ms_per_gib)) continue;
      const at = ok(e.at) && e.at < 8.64e15 ? e.at : 0; // a date Date can hold
      const perLayer = Object.fromEntries(Object.entries(e.per_layer_ms ?? {}).filter(([, v]) => ok(v)));
      this.byDevice.set(SpeedBook.key(e.machine, e.device), { msPerGib: e.ms_per_gib, perLayer, samples: ok(e.samples) ? e.samples : 1, at });
    }
  }

  /** Every device's speed, for the store. */
  entries(): StoredSpeed[] {
    return [...this.byDevice].map(([k, v]) => {
      const [machine, device] = k.split('\u0000') as [string, string];
      return { machine, device, ms_per_gib: v.msPerGib, per_layer_ms: { ...v.perLayer }, samples: v.samples, at: v.at };
    });
  }

  private static key(machine: string, device: string): string {
    return `${machine}\u0000${device}`;
  }

  private observe(machine: string, device: string, m: LayerModel, layers: number, ms: number): void {
    const k = SpeedBook.key(machine, device);
    const next = observeDevice(this.byDevice.get(k), m, layers, ms, this.now());
    if (!next) return;
    this.byDevice.set(k, next);
    this.onChange();
  }

  /** A replica's answer: the whole model ran on `device` of `machine` at `msPerToken`. */
  replica(machine: string, device: string, model: ModelRecord, msPerToken: number): void {
    const m = shardModel(model);
    if (m) this.observe(machine, device, m, m.blockCount, msPerToken);
  }

  /**
   * A shard's answer at `msPerToken`: each remote stage measured by what the hub waited on it less its link's round
   * trip, the hub's stage by what is left (`waits`: the remote stages in plan order). Returns each stage's share (ms),
   * in plan order, or null where the whole could not be split.
   */
  shard(stages: readonly Stage[], hubMachine: string, model: ModelRecord, msPerToken: number, waits: readonly StageWait[]): number[] | null {
    const m = shardModel(model);
    // One wait per remote stage per token holds for dense layers only: a MoE stage is waited on once per layer.
    if (!m || m.isMoe || waits.length !== stages.filter((st) => st.node !== null).length) return null;
    const split = stageTimes(msPerToken, waits);
    if (!split) return null;
    let r = 0;
    const shares = stages.map((st) => (st.node === null ? split.hubMs : split.remoteMs[r++]!));
    stages.forEach((st, i) => this.observe(st.node ?? hubMachine, st.device, m, st.layers[1] - st.layers[0], shares[i]!));
    return shares;
  }

  /**
   * A model removed from the registry: its ms per layer goes from every device (the name may next be registered
   * for another GGUF); what the devices measured across models stays.
   */
  forgetModel(name: string): void {
    let changed = false;
    for (const [k, s] of this.byDevice) {
      if (!(name in s.perLayer)) continue;
      const { [name]: _gone, ...perLayer } = s.perLayer;
      this.byDevice.set(k, { ...s, perLayer });
      changed = true;
    }
    if (changed) this.onChange();
  }

  /** Predicted ms per layer per token of `model` on a device, and whence. */
  layerMs(machine: string, device: string, hw: DeviceHardware, model: ModelRecord): { ms: number; source: SpeedSource } | null {
    const m = shardModel(model);
    return m ? layerMs(this.byDevice.get(SpeedBook.key(machine, device)), hw, m) : null;
  }

  /** A device's speed for /status: measured, else from its memory's bandwidth, else its kind's default. */
  status(machine: string, device: string, hw: DeviceHardware): DeviceSpeedStatus {
    const s = this.byDevice.get(SpeedBook.key(machine, device));
    if (!s) {
      const d = defaultMsPerGib(hw);
      const from = d.source === 'bandwidth' ? { mem_gbps: Math.round(hw.memGBps!) } : {};
      return { ms_per_gib: round(d.msPerGib), source: d.source, ...from, samples: 0, per_layer_ms: {}, measured_at: null };
    }
    const measuredAt = s.at > 0 ? new Date(s.at).toISOString() : null;
    const perLayer = Object.fromEntries(Object.entries(s.perLayer).map(([k, v]) => [k, round(v)]));
    return { ms_per_gib: round(s.msPerGib), source: 'measured', samples: s.samples, per_layer_ms: perLayer, measured_at: measuredAt };
  }
}

const round = (x: number): number => Math.round(x * 1000) / 1000;

/**
 * One answer's measures, when its lease is released: its speculation's drafts (the spec tally) and, for an answer
 * that accepted no drafted token, its generation speed (the device speeds; a shard's split by stage).
 */
export function answered(
  p: Placement,
  model: ModelRecord,
  r: LeaseReport | null | undefined,
  to: { specs: SpecTallies; speeds: SpeedBook; launcher: Launcher; nodes?: NodeManager | undefined },
): void {
  if (r?.drafted) to.specs.add(p.model, p.spec.type, r.drafted, r.draftAccepted ?? 0);
  const tps = r?.tokensPerSecond;
  if (!tps || !Number.isFinite(tps) || tps <= 0 || (r?.drafted ?? 0) > 0) return;
  const ms = 1000 / tps;
  p.plainMsPerToken = nextMsPerToken(p.plainMsPerToken, tps);
  if (!p.shardPlan) return to.speeds.replica(p.node?.name ?? HUB, p.device, model, ms);
  const members = to.launcher.shardInfo(p)?.members ?? [];
  const waits = members.map((m) => ({ waitMs: m.waitMs, rttMs: to.nodes?.get(m.node)?.link().rttMs ?? null }));
  p.stageMs = to.speeds.shard(p.shardPlan.stages, HUB, model, ms, waits) ?? p.stageMs;
}
