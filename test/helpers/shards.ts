import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { ShardStatus } from '../../src/shared/status.js';

/**
 * A MoE shard of the moewide fixture, as the head llama-server runs it: one --override-tensor per remote stage
 * naming only that stage's layers' expert tensors, and llama-server's report putting exactly those bytes
 * (64 experts × 3 × 128 × 256 f32 = 24 MiB per layer) in that stage's RPC buffer.
 */
export function assertExpertStages(sh: Pick<ShardStatus, 'pid' | 'stages' | 'buffers'>): void {
  assert.ok(sh.pid !== null, 'the shard head runs');
  const argv = readFileSync(`/proc/${sh.pid}/cmdline`, 'utf8').split('\0');
  const ot = argv[argv.indexOf('--override-tensor') + 1]!;
  const remote = sh.stages.filter((st) => st.node);
  assert.equal(ot.split(',').length, remote.length);
  for (const st of remote) {
    const layers = Array.from({ length: st.layers[1] - st.layers[0] }, (_, i) => st.layers[0] + i).join('|');
    assert.ok(ot.split(',').includes(`^(?:blk\\.(${layers})\\.ffn_(gate|up|down)_exps\\.weight)$=RPC0[${st.rpc_endpoint}]`), ot);
    const line = sh.buffers.find((b) => b.includes(`RPC0[${st.rpc_endpoint}]`))!;
    assert.ok(Math.abs(Number(/=\s*([\d.]+) MiB/.exec(line)![1]) - 24 * (st.layers[1] - st.layers[0])) < 0.01, line);
  }
}
