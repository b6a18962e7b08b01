import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CommandBody } from '../../src/shared/protocol.js';
import type { LlamaInstall } from '../../src/main/core/llama/install.js';
import type { NodeManager } from '../../src/main/core/pool/manager.js';
import { fitNeed } from '../../src/main/core/scheduler/decide/fit.js';
import { ShardLauncher } from '../../src/main/core/scheduler/launch/launch-shard.js';
import { newPlacement } from '../../src/main/core/scheduler/placements/placement.js';
import type { Stage } from '../../src/main/core/scheduler/decide/shard.js';
import { fakeNode, log, model, rejected, setup } from '../helpers/scheduler-doubles.js';

/**
 * A shard stopped while it starts: the scheduler calls stop() once (pause, eviction, a lost node) and never
 * again if start() then fails. Whatever the node starts after the stop must still be stopped.
 */
describe('shard launcher: a stop while the shard starts', () => {
  it('a member whose start-rpc was in flight when stop() came is stopped when the node answers; start() rejects', async () => {
    const sent: string[] = [];
    let answerStart: () => void = () => undefined;
    const north = fakeNode('north', 4000, {
      command: async (msg: CommandBody) => {
        sent.push(`${msg.type} ${'rpc' in msg ? msg.rpc : ''}`.trim());
        if (msg.type === 'start-rpc') await new Promise<void>((r) => (answerStart = r));
        return { type: 'reply', id: 0, ok: true, data: {} };
      },
    } as never);
    const nodes = { get: (n: string) => (n === 'north' ? north : undefined) } as unknown as NodeManager;
    const { config } = setup({ models: [] });
    const launcher = new ShardLauncher({ config, install: {} as LlamaInstall, nodes, log });
    const m = model('big', 3000);
    const stages: Stage[] = [
      { node: 'north', device: 'CPU', kind: 'cpu', layers: [0, 2], needMb: 1500, freeMb: 4000, output: false },
      { node: null, device: 'CPU', kind: 'cpu', layers: [2, 4], needMb: 1500, freeMb: 4000, output: true },
    ];
    const p = newPlacement(m, { kind: 'shard', plan: { kind: 'shard', stages }, evict: [] }, fitNeed({ requiredVramMb: 3000, sizeBytes: m.size, kvBytesPerToken: 1024 }, config), 0, 60_000, {
      type: null,
      why: 'set to none',
    });

    const started = launcher.start(p, m);
    while (!sent.includes(`start-rpc ${p.id}-0`)) await new Promise((r) => setImmediate(r));
    await launcher.stop(p); // nothing answered yet: no member to stop
    assert.deepEqual(sent, [`start-rpc ${p.id}-0`]);
    answerStart();
    const err = await rejected(started);
    assert.match(err.message, /stopped while it started/);
    assert.deepEqual(sent, [`start-rpc ${p.id}-0`, `stop-rpc ${p.id}-0`], 'the late member is stopped, once');
    assert.equal(launcher.info(p), null);
  });
});
