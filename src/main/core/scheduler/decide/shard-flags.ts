import type { ShardModel, ShardPlan } from './shard.js';

/** llama-server's flags for a shard plan, pure (shard.ts plans; this says how llama-server runs the plan). */
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
