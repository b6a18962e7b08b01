#!/usr/bin/env node
// Writes scripts/gpu-check/plan.json: the llama-server flags relay's shard planner emits for the GPU check's
// shape (a node lending a CPU ggml-rpc-server, the hub's GPU last with the output), for the dry run's 4-layer
// fixture and the GPU run's 16-layer one. gpu-check.sh runs on a machine without Node, so it reads this file;
// test/unit/gpu-check.test.ts keeps it equal to what the planner emits now.
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const { planShard } = await import(join(here, '..', '..', 'dist', 'src', 'main', 'core', 'scheduler', 'decide', 'shard.js'));
const { shardFlags } = await import(join(here, '..', '..', 'dist', 'src', 'main', 'core', 'scheduler', 'decide', 'shard-flags.js'));
const { llamaServerArgv } = await import(join(here, '..', '..', 'dist', 'src', 'main', 'core', 'llama', 'argv.js'));

export function checkPlan(blockCount) {
  const settings = { contextSize: 512, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' };
  // Free memory 3:1 (hub GPU : node CPU budget) and a model that needs both: the hub gets three quarters.
  const devices = [
    { node: null, device: '{HUB_DEVICE}', kind: 'gpu', freeMb: 30000, totalMb: 30000 },
    { node: 'node', device: 'CPU', kind: 'cpu', freeMb: 10000, totalMb: 10000 },
  ];
  const model = { name: 'gpu-check', blockCount, weightsMb: 32000, kvBytesPerToken: null, isMoe: false };
  const plan = planShard(devices, model, settings);
  if (plan.kind !== 'shard') throw new Error(`no shard for ${blockCount} layers: ${plan.reason}`);
  const f = shardFlags(plan, model, ['{RPC_ENDPOINT}']);
  // Only the placement flags: gpu-check.sh adds model, ctx and port itself.
  const argv = llamaServerArgv({
    model: 'M',
    host: 'H',
    port: 0,
    ctx: 1,
    slots: 1,
    cacheType: 'f16',
    rpc: f.rpc,
    devices: f.devices,
    gpuLayers: f.gpuLayers,
    tensorSplit: f.tensorSplit,
    overrides: f.overrides,
    fit: f.fit,
  });
  const from = argv.indexOf('--no-webui') + 1;
  return { stages: plan.stages.map((s) => ({ node: s.node, device: s.device, layers: s.layers, output: s.output })), argv: argv.slice(from) };
}

export function plans() {
  return { 4: checkPlan(4), 16: checkPlan(16) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(join(here, 'plan.json'), `${JSON.stringify(plans(), null, 2)}\n`);
  console.log('wrote scripts/gpu-check/plan.json');
}
