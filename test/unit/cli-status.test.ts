import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { statusLines, table } from '../../src/main/cli/status.js';

describe('relay status (pure formatting)', () => {
  it('pads columns to the widest cell and never leaves trailing spaces', () => {
    assert.deepEqual(
      table(
        ['A', 'LONG HEADER'],
        [
          ['xyz', 'b'],
          ['q', ''],
        ],
      ),
      ['A    LONG HEADER', 'xyz  b', 'q'],
    );
  });

  it('shows every part of the pool a person asks about: machines, devices, placements with stages, models, pushes, queues, backoffs', () => {
    const lines = statusLines({
      relay: '0.1.0',
      llama_cpp: { tag: 'b7000', backend: 'cpu' },
      hub: { availability: 'paused', reason: 'paused by the owner' },
      devices: [{ id: 'CPU', description: 'cpu budget', total_mb: 4000, free_mb: 3000, speed: { ms_per_gib: 40, source: 'default', samples: 0, per_layer_ms: {}, measured_at: null } }],
      nodes: [
        {
          name: 'attic',
          state: 'idle',
          reason: null,
          link: { rtt_ms: 2.4, bytes_per_s: null },
          devices: [
            { id: 'CUDA0', description: 'RTX 3060', total_mb: 12288, free_mb: 9000, speed: { ms_per_gib: 3.1, source: 'measured', samples: 4, per_layer_ms: {}, measured_at: null } },
            {
              id: 'CUDA1',
              description: 'RTX 4070 SUPER',
              total_mb: 12282,
              free_mb: 11000,
              speed: { ms_per_gib: 2.841, source: 'bandwidth', mem_gbps: 504, samples: 0, per_layer_ms: {}, measured_at: null },
            },
          ],
        },
      ],
      replicas: [{ model: 'qwen', state: 'ready', in_flight: 1, slots: 2, ctx: 4096, node: 'attic', device: 'CUDA0', ms_per_token: 12.34 }],
      shards: [
        {
          model: 'big',
          state: 'starting',
          in_flight: 0,
          slots: 2,
          ctx: 4096,
          ms_per_token: null,
          stages: [
            { node: 'attic', device: 'CUDA0', layers: [0, 20] },
            { node: null, device: 'CPU', layers: [20, 32] },
          ],
        },
        {
          model: 'wide',
          state: 'ready',
          in_flight: 0,
          slots: 1,
          ctx: 2048,
          ms_per_token: 30.5,
          predicted_ms_per_token: 20,
          replan: {
            reason: 'measured 30.5 ms/token, predicted 20.0 (+53%)',
            predicted_ms_per_token: 24.5,
            stages: [
              { node: null, device: 'CPU', layers: [0, 8] },
              { node: 'attic', device: 'CUDA0', layers: [8, 32] },
            ],
          },
          stages: [{ node: 'attic', device: 'CUDA0', layers: [0, 32] }],
        },
      ],
      models: [
        { name: 'qwen', size: 5 * 1048576, need_mb: 900, fits_now: true, shortfall: null },
        { name: 'huge', size: 1048576, need_mb: 99999, fits_now: false, shortfall: 'needs 99999 MB' },
      ],
      pushes: [{ node: 'attic', model: 'big', done: 25, total: 100 * 1048576 }],
      queues: [
        { model: 'qwen', waiting: 2 },
        { model: 'big', waiting: 0 },
      ],
      backoffs: [{ node: 'cellar', model: 'qwen', reason: 'load failed: bad file', until: '2026-11-30T20:00:00.000Z' }],
    });
    const text = lines.join('\n');
    assert.match(text, /^relay 0\.1\.0 · llama\.cpp b7000 \(cpu\)\nhub: paused \(paused by the owner\)/);
    assert.match(text, /\n {2}attic {2}idle +2\.4 ms/);
    assert.match(text, /\n {2}hub +CPU +cpu budget +3000 of 4000 MB free +40 ms\/GiB \(default\)/);
    assert.match(text, /\n {2}attic +CUDA0 +RTX 3060 +9000 of 12288 MB free +3\.1 ms\/GiB$/m);
    assert.match(text, /\n {2}attic +CUDA1 +RTX 4070 SUPER +11000 of 12282 MB free +2\.841 ms\/GiB \(from 504 GB\/s\)$/m);
    assert.match(text, /\n {2}wide +shard .* +30\.5 \(predicted 20\.0\)/);
    assert.match(text, /RE-PLANS AT THE NEXT COLD START\n.*\n {2}wide +hub:CPU\[0-8\) → attic:CUDA0\[8-32\) +24\.5 +measured 30\.5 ms\/token/);
    assert.match(text, /\n {2}qwen +replica +attic +CUDA0 +ready +1\/2 +4096 +12\.3/);
    assert.match(text, /\n {2}big +shard +attic:CUDA0\[0-20\) → hub:CPU\[20-32\) +starting +0\/2 +4096/);
    assert.match(text, /\n {2}huge +1\.0 MB +99999 MB +unavailable: needs 99999 MB/);
    assert.match(text, /PUSHES\n.*\n {2}attic +big +0% of 100\.0 MB/);
    assert.match(text, /WAITING REQUESTS\n.*\n {2}qwen +2$/m);
    assert.doesNotMatch(text, /\n {2}big +0$/m, 'an empty queue is not listed');
    assert.match(text, /BACKOFFS\n.*\n {2}cellar +qwen +2026-11-30T20:00:00\.000Z +load failed: bad file/);
    for (const l of lines) assert.equal(l, l.trimEnd());
  });

  it('a loading placement shows its time so far against its deadline', () => {
    const lines = statusLines({
      replicas: [
        {
          model: 'llama70',
          state: 'starting',
          in_flight: 0,
          slots: 1,
          ctx: 8192,
          node: 'attic',
          device: 'CUDA0',
          ms_per_token: null,
          load: { since: '2026-12-01T10:00:00Z', elapsed_ms: 95_000, deadline_ms: 1_920_000 },
        },
        {
          model: 'small',
          state: 'starting',
          in_flight: 0,
          slots: 1,
          ctx: 8192,
          node: null,
          device: 'CPU',
          ms_per_token: null,
          load: { since: '2026-12-01T10:00:00Z', elapsed_ms: 4_000, deadline_ms: 131_000 },
        },
      ],
    });
    const rows = lines.filter((l) => /llama70|small/.test(l));
    assert.match(rows[0]!, /loading 95 s of 32 min/);
    assert.match(rows[1]!, /loading 4 s of 2 min/);
  });

  it('says what to do when the pool is empty', () => {
    const text = statusLines({ hub: { availability: 'idle', reason: null }, devices: [], nodes: [], replicas: [], shards: [], models: [] }).join('\n');
    assert.match(text, /no nodes joined \(relay nodes token\)/);
    assert.match(text, /none running \(the first request for a model places it\)/);
    assert.match(text, /none registered \(relay models add FILE\.gguf\)/);
  });
});
