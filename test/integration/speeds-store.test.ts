import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { hubConfigFromEnv } from '../../src/main/core/config.js';
import { startHub } from '../../src/main/core/hub/index.js';
import { createLogger } from '../../src/main/core/log.js';
import { SpeedBook } from '../../src/main/core/scheduler/run/speeds.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';
import type { StatusDto } from '../../src/shared/status.js';
import { fixture, llama } from '../helpers/llama.js';

const log = createLogger({ level: 'warn', pretty: false });
const record = { name: 'm', block_count: 8, required_vram_mb: 1024, size: 0 } as unknown as ModelRecord;

describe('measured speeds across a hub restart', () => {
  it('what a hub measured is in its store and in /status after it restarts; the plan need not wait for new answers', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-hub-'));
    const config = hubConfigFromEnv({ HOME: tmpdir() }, { port: 0, home, cpuBudgetMb: 500 });
    const first = await startHub(config, { log, install: llama() });
    first.scheduler.placer.speeds.replica('hub', 'CPU', record, 16); // 2 ms per layer, 16 ms per GiB
    first.scheduler.placer.speeds.replica('north', 'CPU', record, 40);
    await first.close(); // writes what was measured since the last write
    const stored = JSON.parse(readFileSync(join(home, 'relay.json'), 'utf8')) as { device_speeds: unknown[] };
    assert.equal(stored.device_speeds.length, 2);

    const again = await startHub(config, { log, install: llama() });
    try {
      const s = (await (await fetch(`${again.url}/status`)).json()) as StatusDto;
      const cpu = s.devices.find((d) => d.id === 'CPU')!;
      assert.deepEqual([cpu.speed!.source, cpu.speed!.ms_per_gib, cpu.speed!.per_layer_ms], ['measured', 16, { m: 2 }]);
      assert.equal(again.scheduler.placer.speeds.layerMs('north', 'CPU', { kind: 'cpu' }, record)!.ms, 5);
    } finally {
      await again.close();
    }
  });

  it("a model removed from the registry takes its per-layer figures with it, from /status and the store; the device's own figure stays", async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-hub-'));
    const hub = await startHub(hubConfigFromEnv({ HOME: tmpdir() }, { port: 0, home, cpuBudgetMb: 500 }), { log, install: llama() });
    try {
      const add = await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: fixture('dense'), name: 'm' }) });
      assert.equal(add.status, 201);
      hub.scheduler.placer.speeds.replica('hub', 'CPU', record, 12);
      hub.scheduler.placer.speeds.replica('hub', 'CPU', { ...record, name: 'other' }, 12);
      const cpu = async () => ((await (await fetch(`${hub.url}/status`)).json()) as StatusDto).devices.find((d) => d.id === 'CPU')!.speed!;
      assert.deepEqual(Object.keys((await cpu()).per_layer_ms).sort(), ['m', 'other']);
      const before = (await cpu()).ms_per_gib;
      assert.equal((await fetch(`${hub.url}/api/models/m`, { method: 'DELETE' })).status, 200);
      assert.deepEqual([Object.keys((await cpu()).per_layer_ms), (await cpu()).ms_per_gib], [['other'], before]);
      await hub.close();
      const stored = JSON.parse(readFileSync(join(home, 'relay.json'), 'utf8')) as { device_speeds: { per_layer_ms: Record<string, number> }[] };
      assert.deepEqual(Object.keys(stored.device_speeds[0]!.per_layer_ms), ['other']);
    } finally {
      await hub.close();
    }
  });

  it('a damaged or hostile entry in the store is dropped, the rest kept', () => {
    const book = new SpeedBook();
    let changes = 0;
    book.onChange = () => changes++;
    book.restore([
      { machine: 'a', device: 'CPU', ms_per_gib: 10, per_layer_ms: { m: 1, bad: -1, nan: NaN }, samples: 3, at: 5 },
      { machine: 'b', device: 'CPU', ms_per_gib: -4, per_layer_ms: {}, samples: 1, at: 0 },
      { machine: 'c', device: 'CPU', ms_per_gib: Infinity, per_layer_ms: {}, samples: 1, at: 0 },
      { machine: 7, device: 'CPU', ms_per_gib: 10, per_layer_ms: {}, samples: 1, at: 0 } as never,
      null as never,
    ]);
    assert.deepEqual(book.entries(), [{ machine: 'a', device: 'CPU', ms_per_gib: 10, per_layer_ms: { m: 1 }, samples: 3, at: 5 }]);
    assert.equal(changes, 0, 'restoring is no change to write back');
    book.replica('a', 'CPU', record, 8);
    assert.equal(changes, 1);
  });
});
