import type { ModelRecord } from '../../store/store.js';
import type { MemoryLayout } from '../../gguf/memory.js';
import { partNeed, projectorNeedMb, type FitSettings } from './fit.js';

/**
 * Pipeline shards, pure: inventory + model + settings → plan, and plan → llama-server flags. No I/O.
 *
 * A plan lists stages in execution order. The hub's stage runs last when the hub has a GPU (hostStageLast):
 * then only a hidden state crosses the network per token, never the vocabulary-sized logits. With an opted-in
 * CPU budget instead, llama.cpp always runs CPU-resident layers first (`-ngl` offloads the *last* layers),
 * so the hub's stage holds the first layers; the output layer and sampling still run on the hub, which is
 * the property hub-last exists for.
 */
export interface ShardDevice {
  /** null = the hub itself. */
  readonly node: string | null;
  /** llama.cpp device name on that machine (CUDA0, …) or CPU for an opted-in CPU budget. */
  readonly device: string;
  readonly kind: 'gpu' | 'cpu';
  readonly freeMb: number;
  readonly totalMb: number;
  /** Predicted ms per layer per token of the model being planned (speed.ts layerMs); absent: every device alike. */
  readonly msPerLayer?: number;
  /** A remote stage's link cost per token (speed.ts hopMs); absent: 0. */
  readonly hopMs?: number;
}

export interface ShardModel {
  readonly name: string;
  readonly blockCount: number;
  readonly weightsMb: number;
  readonly kvBytesPerToken: number | null;
  /** The per-layer cache layout (fit.ts): a stage holds the KV of its own layers; absent: shares by layer count. */
  readonly memory?: MemoryLayout | null | undefined;
  readonly isMoe: boolean;
  /**
   * MoE: the part of weightsMb in expert tensors (ffn_{gate,up,down}_exps), from the GGUF's tensor table. Only
   * these move to remote stages; null = unknown (a model registered before relay read it): proportional shares.
   */
  readonly expertWeightsMb?: number | null;
  /** A vision model's projector (fit.ts projectorNeedMb): it runs beside the head, so the hub's stage holds it. */
  readonly projectorMb?: number;
}

/** The split planner's view of a model (null: the header gives no layer count to split). */
export function shardModel(model: ModelRecord): ShardModel | null {
  if (!model.block_count) return null;
  const weightsMb = model.required_vram_mb ?? model.size / (1024 * 1024);
  return {
    name: model.name,
    blockCount: model.block_count,
    weightsMb,
    kvBytesPerToken: model.kv_bytes_per_token,
    memory: model.memory,
    isMoe: model.expert_count > 0 && model.expert_used_count > 0,
    // The experts' share of the weights, scaled like the weights themselves (required_vram_mb or the file).
    expertWeightsMb: model.expert_bytes != null && model.tensor_bytes ? weightsMb * (model.expert_bytes / model.tensor_bytes) : null,
    projectorMb: projectorNeedMb(model.mmproj?.size),
  };
}

export interface Stage {
  readonly node: string | null;
  readonly device: string;
  readonly kind: 'gpu' | 'cpu';
  /** [first, end) in llama.cpp's layer numbering. */
  readonly layers: readonly [number, number];
  readonly needMb: number;
  readonly freeMb: number;
  /** The output layer (and so sampling) runs here. */
  readonly output: boolean;
  /** The plan's prediction of this stage's ms per token (its layers and, remote, its hop). */
  readonly predictedMs?: number;
}

export type ShardPlan = { readonly kind: 'shard'; readonly stages: readonly Stage[]; readonly predictedMsPerToken?: number } | { readonly kind: 'none'; readonly reason: string };

/** Split `n` layers in proportion to `shares` (largest remainder), every share at least one layer. */
export function splitLayers(n: number, shares: readonly number[]): number[] {
  const k = shares.length;
  if (k === 0 || n < k) return [];
  const total = shares.reduce((a, b) => a + Math.max(0, b), 0);
  const raw = shares.map((x) => (total > 0 ? Math.max(0, x) / total : 1 / k) * n);
  const out = raw.map((r) => Math.max(1, Math.floor(r)));
  let diff = n - out.reduce((a, b) => a + b, 0);
  const byRemainder = raw.map((r, i) => [r - Math.floor(r), i] as const).sort((x, y) => y[0] - x[0] || x[1] - y[1]);
  for (let j = 0; diff > 0; j++, diff--) out[byRemainder[j % k]![1]]! += 1;
  while (diff < 0) {
    // The minimum of one layer pushed the sum over n: take back from the largest share.
    const i = out.indexOf(Math.max(...out));
    out[i]! -= 1;
    diff++;
  }
  return out;
}

/**
 * What one stage holding `layers` [from, to) of the model needs: fit.ts's partNeed for its share. A dense stage
 * holds its layers' weights and KV (each layer's own, sliding and recurrent ones included) and runs their
 * attention; the output stage the logits too. A MoE shard moves only experts: a remote stage holds its layers'
 * experts and no KV; the hub holds attention, router, embeddings and output of every layer, the KV of every layer
 * and its own layers' experts.
 */
export function stageNeedMb(model: ShardModel, layers: readonly [number, number], s: FitSettings, role: 'hub' | 'remote' = 'remote', output = role === 'hub'): number {
  const share = (layers[1] - layers[0]) / model.blockCount;
  const experts = model.isMoe && model.expertWeightsMb != null ? Math.min(model.expertWeightsMb, model.weightsMb) : null;
  const weightsMb = experts === null ? model.weightsMb * share : role === 'hub' ? model.weightsMb - experts + experts * share : experts * share;
  const cached: readonly [number, number] | null = experts === null ? layers : role === 'hub' ? [0, model.blockCount] : null;
  const need = partNeed(model, model.blockCount, s, { weightsMb, layers: cached, output }).needMb;
  return need + (role === 'hub' ? (model.projectorMb ?? 0) : 0);
}

/** Put the hub's stage last (or first) and renumber every stage's layer range to match the new order. */
function reorder<T extends { node: string | null; layers: readonly [number, number] }>(stages: readonly T[], hubFirst: boolean): T[] {
  const hub = stages.filter((s) => s.node === null);
  const rest = stages.filter((s) => s.node !== null);
  let at = 0;
  return (hubFirst ? [...hub, ...rest] : [...rest, ...hub]).map((s) => {
    const n = s.layers[1] - s.layers[0];
    const r = { ...s, layers: [at, at + n] as const };
    at += n;
    return r;
  });
}

/** Reorder so the hub's stage is last (GPU hub) and renumber every stage's layer range to match. */
export function hostStageLast<T extends { node: string | null; layers: readonly [number, number] }>(stages: readonly T[]): T[] {
  return reorder(stages, false);
}

/** Remote devices beyond this many are tried as prefixes (by free memory, by speed), not as every subset. */
const EVERY_SUBSET_UP_TO = 6;
/** A candidate replaces the best so far only when predicted this much faster: ties keep the simpler plan. */
const BETTER_BY = 0.005;

export interface PlanOptions {
  /** `memory`: the pre-measurement planner (layers by free memory, the fewest members that fit); the shard bench's baseline. */
  readonly by?: 'speed' | 'memory';
}

/** The remote member sets to try: by size, the ones with the most free memory first in each size. */
function* memberSets(remote: readonly ShardDevice[], memoryOnly: boolean): Generator<ShardDevice[]> {
  const n = remote.length;
  const bySpeed = [...remote].sort((a, b) => (a.msPerLayer ?? 1) - (b.msPerLayer ?? 1) || b.freeMb - a.freeMb);
  // Every other subset, grouped by size once (each size's prefix by free memory is tried first, above them).
  const bySize: ShardDevice[][][] = Array.from({ length: n + 1 }, () => []);
  if (!memoryOnly && n <= EVERY_SUBSET_UP_TO) {
    for (let mask = 1; mask < 1 << n; mask++) {
      const set = remote.filter((_, i) => mask & (1 << i));
      if (!set.every((d, i) => d === remote[i])) bySize[set.length]!.push(set);
    }
  }
  for (let k = 1; k <= n; k++) {
    yield remote.slice(0, k);
    if (memoryOnly) continue;
    if (n > EVERY_SUBSET_UP_TO) yield bySpeed.slice(0, k);
    else yield* bySize[k]!;
  }
}

/** The most layers of the model one member could hold (its need counted as a first stage; checked again on the final ranges). */
function capacity(d: ShardDevice, model: ShardModel, s: FitSettings): number {
  const role = d.node === null ? 'hub' : 'remote';
  let lo = 0;
  let hi = model.blockCount;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (stageNeedMb(model, [0, mid], s, role, role === 'hub') <= d.freeMb) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Fastest first: each member in order of ms per layer takes as many layers as it holds, leaving one for each after it. */
function fillFastest(members: readonly ShardDevice[], caps: readonly number[], n: number): number[] | null {
  const order = members.map((_, i) => i).sort((a, b) => (members[a]!.msPerLayer ?? 1) - (members[b]!.msPerLayer ?? 1) || members[b]!.freeMb - members[a]!.freeMb);
  const counts = members.map(() => 0);
  let left = n;
  order.forEach((i, j) => {
    const c = Math.min(caps[i]!, left - (order.length - 1 - j));
    counts[i] = c;
    left -= c;
  });
  return left === 0 && counts.every((c) => c >= 1) ? counts : null;
}

/** Stages for members holding `counts` layers, in execution order, each need counted on its final range; null when one does not fit. */
function stagesOf(members: readonly ShardDevice[], counts: readonly number[], model: ShardModel, s: FitSettings, hubFirst: boolean): { stages: Stage[]; over: number[] } {
  let at = 0;
  const drafted = members.map((d, i) => {
    const n = counts[i]!;
    const st = { node: d.node, device: d.device, kind: d.kind, layers: [at, at + n] as const, needMb: 0, freeMb: d.freeMb, output: false, member: i };
    at += n;
    return st;
  });
  // GPU hub: its stage goes last. CPU hub: llama.cpp runs CPU layers first (see above). Each stage's need is
  // counted on its final layer range: which layers slide or keep state depends on where they are.
  const ordered = reorder(drafted, hubFirst);
  const hasHub = members.some((d) => d.node === null);
  const outputAt = hasHub ? ordered.findIndex((st) => st.node === null) : ordered.length - 1;
  const stages = ordered.map((st, i) => ({ ...st, output: i === outputAt, needMb: stageNeedMb(model, st.layers, s, st.node === null ? 'hub' : 'remote', i === outputAt) }));
  return { stages: stages.map(({ member: _m, ...st }) => st), over: stages.filter((st) => st.needMb > st.freeMb).map((st) => st.member) };
}

/** A token's predicted time through the stages: each stage's layers at its device's speed, each remote stage's hop. */
function predictOf(members: readonly ShardDevice[], stages: readonly Stage[], model: ShardModel): Stage[] {
  return stages.map((st) => {
    const d = members.find((m) => m.node === st.node && m.device === st.device)!;
    const n = st.layers[1] - st.layers[0];
    // A dense remote stage is waited on once per token; a MoE one once per layer (its experts, between the hub's attention).
    const hops = st.node === null ? 0 : model.isMoe ? n : 1;
    return { ...st, predictedMs: n * (d.msPerLayer ?? 1) + hops * (d.hopMs ?? 0) };
  });
}

/**
 * The shard predicted fastest among the member sets that can hold the model: the hub's device (when it has one)
 * and each set of remote devices, layers split in proportion to free memory or filled fastest device first, a
 * token's time predicted as Σ stage layers × ms/layer + Σ remote hops. With nothing measured every layer costs
 * the same: the fewest members, split by free memory (what relay did before it measured). `by: 'memory'` plans
 * only that way.
 */
export function planShard(devices: readonly ShardDevice[], model: ShardModel, s: FitSettings, opts: PlanOptions = {}): ShardPlan {
  const hub = devices.filter((d) => d.node === null).sort((a, b) => b.freeMb - a.freeMb)[0];
  const remote = devices.filter((d) => d.node !== null).sort((a, b) => b.freeMb - a.freeMb);
  if (remote.length === 0) return { kind: 'none', reason: 'no connected node to shard with' };
  const memoryOnly = opts.by === 'memory';
  let best: { stages: Stage[]; ms: number } | null = null;
  // What each device could hold, worked out once per plan (every member set asks again).
  const held = new Map<ShardDevice, number>();
  const capOf = (d: ShardDevice): number => held.get(d) ?? held.set(d, capacity(d, model, s)).get(d)!;
  for (const set of memberSets(remote, memoryOnly)) {
    const members = [...set, ...(hub ? [hub] : [])];
    if (members.length < 2 || members.length > model.blockCount) continue;
    const tries: (number[] | null)[] = [
      splitLayers(
        model.blockCount,
        members.map((d) => d.freeMb),
      ),
    ];
    const caps = memoryOnly ? [] : members.map((d) => capOf(d));
    for (let round = 0; !memoryOnly && round < 4; round++) {
      const counts = fillFastest(members, caps, model.blockCount);
      if (!counts) break;
      const { over } = stagesOf(members, counts, model, s, hub?.kind === 'cpu');
      if (over.length === 0) {
        tries.push(counts);
        break;
      }
      for (const i of over) caps[i] = counts[i]! - 1; // held less than its first-stage estimate where it landed
    }
    for (const counts of tries) {
      if (!counts || counts.length === 0) continue;
      const { stages, over } = stagesOf(members, counts, model, s, hub?.kind === 'cpu');
      if (over.length > 0) continue;
      const predicted = predictOf(members, stages, model);
      const ms = predicted.reduce((a, st) => a + (st.predictedMs ?? 0), 0);
      if (!best || ms < best.ms * (1 - BETTER_BY)) best = { stages: predicted, ms };
    }
    if (memoryOnly && best) break;
  }
  if (!best) return { kind: 'none', reason: 'the hub and the connected nodes together cannot hold it' };
  return { kind: 'shard', stages: best.stages, predictedMsPerToken: best.ms };
}
