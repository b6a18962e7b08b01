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
  /** Relative throughput when known (1 = unknown/average): layers are split by free VRAM × this. */
  readonly weight?: number;
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
}

export type ShardPlan = { readonly kind: 'shard'; readonly stages: readonly Stage[] } | { readonly kind: 'none'; readonly reason: string };

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

/**
 * The fewest stages that fit: the hub's device (when it has one) plus the remote devices with the most free
 * memory, layers in proportion to free memory × throughput weight, each stage checked against its device.
 */
export function planShard(devices: readonly ShardDevice[], model: ShardModel, s: FitSettings): ShardPlan {
  const hub = devices.filter((d) => d.node === null).sort((a, b) => b.freeMb - a.freeMb)[0];
  const remote = devices.filter((d) => d.node !== null).sort((a, b) => b.freeMb * (b.weight ?? 1) - a.freeMb * (a.weight ?? 1));
  if (remote.length === 0) return { kind: 'none', reason: 'no connected node to shard with' };
  for (let k = 1; k <= remote.length; k++) {
    const members = [...remote.slice(0, k), ...(hub ? [hub] : [])];
    if (members.length < 2 || members.length > model.blockCount) continue;
    const counts = splitLayers(
      model.blockCount,
      members.map((d) => d.freeMb * (d.weight ?? 1)),
    );
    let at = 0;
    const drafted: Stage[] = members.map((d, i) => {
      const n = counts[i]!;
      const st: Stage = { node: d.node, device: d.device, kind: d.kind, layers: [at, at + n], needMb: 0, freeMb: d.freeMb, output: false };
      at += n;
      return st;
    });
    // GPU hub: its stage goes last. CPU hub: llama.cpp runs CPU layers first (see above). Each stage's need is
    // counted on its final layer range: which layers slide or keep state depends on where they are.
    const ordered = reorder(drafted, hub?.kind === 'cpu');
    const outputAt = hub ? ordered.findIndex((st) => st.node === null) : ordered.length - 1;
    const stages = ordered.map((st, i) => ({ ...st, output: i === outputAt, needMb: stageNeedMb(model, st.layers, s, st.node === null ? 'hub' : 'remote', i === outputAt) }));
    if (!stages.every((st) => st.needMb <= st.freeMb)) continue;
    return { kind: 'shard', stages };
  }
  return { kind: 'none', reason: 'the hub and the connected nodes together cannot hold it' };
}

export interface ShardFlags {
  readonly rpc: string[];
  readonly devices: string[];
  readonly gpuLayers: number;
  readonly tensorSplit: number[];
  readonly overrides: { pattern: string; bufferType: string }[];
  readonly fit: 'off' | undefined;
  readonly warnings: string[];
}

function withOutputSlot(split: number[]): number[] {
  return split.map((x, i) => (i === split.length - 1 ? x + 1 : x));
}

function layerAlternation(first: number, end: number): string {
  return Array.from({ length: end - first }, (_, i) => first + i).join('|');
}

/** The output weight (argv.ts writes every override as a whole name: not any layer's attn_output.weight). */
const OUTPUT_WEIGHT = 'output\\.weight';

/**
 * llama-server flags for a plan. `endpoints[i]` is the 127.0.0.1 bridge of remote stage i (in plan order,
 * remote stages only); a missing endpoint means that stage's device could not be resolved.
 * `outputRemote` is the hub-first experiment: the output layer moved to the last remote stage.
 */
export function shardFlags(plan: Extract<ShardPlan, { kind: 'shard' }>, model: ShardModel, endpoints: readonly (string | undefined)[], opts: { outputRemote?: boolean } = {}): ShardFlags {
  const remote = plan.stages.filter((s) => s.node !== null);
  const hubStage = plan.stages.find((s) => s.node === null);
  const rpc = endpoints.filter((e): e is string => e !== undefined);
  const rpcNames = rpc.map((_, i) => `RPC${i}`);
  const warnings: string[] = [];
  const n = model.blockCount;
  const remoteLayers = remote.reduce((a, s) => a + (s.layers[1] - s.layers[0]), 0);
  const hubGpu = hubStage && hubStage.kind === 'gpu' ? hubStage.device : null;
  const devices = hubGpu ? [...rpcNames, hubGpu] : rpcNames;

  if (model.isMoe) {
    // Experts of each remote stage's layers go to that stage's device; attention, router and embeddings
    // stay on the hub for every layer. A stage without a resolvable device is left out, never guessed.
    const overrides: { pattern: string; bufferType: string }[] = [];
    try {
      remote.forEach((st, i) => {
        const ep = endpoints[i];
        if (!ep) {
          warnings.push(`stage ${i} (${st.node}) has no rpc endpoint: its experts stay on the hub`);
          return;
        }
        overrides.push({ pattern: `blk\\.(${layerAlternation(st.layers[0], st.layers[1])})\\.ffn_(gate|up|down)_exps\\.weight`, bufferType: `RPC0[${ep}]` });
      });
      return {
        rpc,
        devices,
        gpuLayers: hubGpu ? n + 1 : 0,
        tensorSplit: hubGpu ? [...rpcNames.map(() => 0), 1] : [],
        overrides,
        fit: 'off',
        warnings,
      };
    } catch (err) {
      warnings.push(`could not build expert overrides (${(err as Error).message}): plain layer split instead`);
    }
  }
  // llama.cpp offloads the last -ngl "layers" counting the output layer as one, so the output lands on the
  // last device. A GPU hub is that last device. A CPU hub is not a device: the output weight is pinned to the
  // CPU buffer so the output layer and sampling still run on the hub (the hub-first experiment skips that).
  const lastRemote = rpc[rpc.length - 1];
  const overrides: { pattern: string; bufferType: string }[] = [];
  if (opts.outputRemote && hubGpu && lastRemote) overrides.push({ pattern: OUTPUT_WEIGHT, bufferType: `RPC0[${lastRemote}]` });
  if (!opts.outputRemote && !hubGpu && hubStage) overrides.push({ pattern: OUTPUT_WEIGHT, bufferType: 'CPU' });
  return {
    rpc,
    devices,
    gpuLayers: hubGpu || !hubStage ? n + 1 : remoteLayers + 1,
    // The split is over the offloaded slots, output included: the last device's share counts it (+1).
    tensorSplit: withOutputSlot(hubGpu ? [...remote.map((s) => s.layers[1] - s.layers[0]), hubStage!.layers[1] - hubStage!.layers[0]] : remote.map((s) => s.layers[1] - s.layers[0])),
    overrides,
    fit: overrides.length > 0 ? 'off' : undefined,
    warnings,
  };
}
