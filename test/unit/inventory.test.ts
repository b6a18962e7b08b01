import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { HostInventory } from '../../src/main/core/gpu/inventory.js';
import type { GpuReading } from '../../src/main/core/gpu/nvml.js';
import { readNvidiaSmi } from '../../src/main/core/gpu/smi.js';
import type { LlamaInstall } from '../../src/main/core/llama/install.js';
import { until } from '../helpers/proc.js';

/**
 * No driver calls on the hot path: the scheduler, /status and /v1/models read devices() many times a second
 * (about five times per unplaced model per dashboard tick); each used to initialise NVML or run nvidia-smi
 * synchronously on the event loop that carries the tokens. Readings now come from timers in the background.
 */
const install = { env: {} } as unknown as LlamaInstall;
const reading = (freeMb: number): GpuReading => ({ index: 0, name: 'NVIDIA GeForce RTX 4070 SUPER', totalMb: 12282, freeMb, utilizationPct: 3, busId: '00000000:01:00.0', uuid: null, source: 'nvml' });

describe('host inventory: readings off the request path', () => {
  it('1,000 devices() calls read the driver not once; a timer keeps the reading fresh', async () => {
    let reads = 0;
    let lists = 0;
    const inv = new HostInventory(install, 0, {
      list: () => {
        lists++;
        return Promise.resolve([{ name: 'CUDA0', description: 'NVIDIA GeForce RTX 4070 SUPER', totalMib: 12282, freeMib: 12000 }]);
      },
      read: () => Promise.resolve([reading(11_000 - ++reads)]),
      readMs: 10,
      listMs: 0,
    });
    await inv.start();
    assert.deepEqual([lists, reads], [1, 1]);
    for (let i = 0; i < 1000; i++) inv.devices();
    assert.deepEqual([lists, reads], [1, 1], 'no reading per call');
    assert.equal(inv.devices()[0]!.reportedFreeMb, 10_999);
    const later = await until(
      () => inv.devices()[0]!.reportedFreeMb,
      (mb) => mb < 10_997,
    );
    assert.ok(later < 10_997, 'the background timer read the driver again');
    inv.close();
  });

  it('nvidia-smi runs as a child in the background: the event loop turns while it answers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-smi-'));
    // A stand-in nvidia-smi that takes its time (a driver under load), then prints one GPU.
    writeFileSync(join(dir, 'nvidia-smi'), '#!/bin/sh\nsleep 0.5\necho "0, NVIDIA GeForce GTX 1060 6GB, 6144, 5000, 7, 00000000:01:00.0, GPU-abc"\n');
    chmodSync(join(dir, 'nvidia-smi'), 0o755);
    const path = process.env.PATH;
    process.env.PATH = `${dir}:${path}`;
    try {
      let ticks = 0;
      const t = setInterval(() => ticks++, 10);
      const r = await readNvidiaSmi();
      clearInterval(t);
      assert.ok(ticks > 5, `timers fired while nvidia-smi ran (${ticks})`);
      assert.deepEqual(
        r?.map((x) => [x.name, x.freeMb, x.busId]),
        [['NVIDIA GeForce GTX 1060 6GB', 5000, '00000000:01:00.0']],
      );
    } finally {
      process.env.PATH = path;
    }
  });

  it('a machine without a GPU lists none and never reads a driver; its CPU budget follows the setting at once', async () => {
    let reads = 0;
    const inv = new HostInventory(install, 512, {
      list: () => Promise.resolve([]),
      read: () => {
        reads++;
        return Promise.resolve(null);
      },
    });
    await inv.start();
    assert.deepEqual(
      inv.devices().map((d) => [d.id, d.totalMb]),
      [['CPU', 512]],
    );
    inv.setCpuBudgetMb(1024);
    assert.equal(inv.devices()[0]!.totalMb, 1024);
    assert.equal(reads, 0);
    inv.close();
  });
});
