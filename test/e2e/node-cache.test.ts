import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { addModel, startHub } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * Node disk hygiene with real hub and node processes: a model removed from the hub leaves every node's cache
 * (at once when the node is connected, on its next connection when it is away), unless another registered name
 * still uses the same file.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

const cached = async (n: NodeProcess): Promise<string[]> => (((await n.local('/status')) as { cache?: { sha256: string }[] }).cache ?? []).map((c) => c.sha256);
const onDisk = (n: NodeProcess, sha256: string): boolean => existsSync(join(n.home, 'cache', 'models', `${sha256}.gguf`));

describe('node caches follow the hub\'s models', { timeout: 300_000 }, () => {
  it('removing a model evicts it from the node now, or when the node next connects; a file another name uses stays', async () => {
    const hub = await startHub({ env: ENV }); // no device of its own: every placement is on the node
    let north = await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV });
    try {
      const a = await addModel(hub, { path: fixture('dense'), name: 'a' });
      const alias = await addModel(hub, { path: fixture('dense'), name: 'a-alias' });
      assert.equal(alias.sha256, a.sha256, 'two names, one file');
      const ask = (model: string) => fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }) });
      assert.equal((await ask('a')).status, 200);
      assert.deepEqual(await cached(north), [a.sha256]);
      assert.ok(onDisk(north, a.sha256), 'the node holds the pushed file where its cache says');

      // One of two names removed: the file still backs the other.
      assert.equal((await hub.api('/api/models/a', { method: 'DELETE' })).status, 200);
      assert.deepEqual(await cached(north), [a.sha256]);
      // The last name removed: the node's copy goes before the DELETE answers.
      assert.equal((await hub.api('/api/models/a-alias', { method: 'DELETE' })).status, 200);
      assert.deepEqual(await cached(north), []);
      assert.ok(!onDisk(north, a.sha256), 'the file is gone from the node\'s disk');

      // Removed while the node is away: evicted when it comes back.
      const b = await addModel(hub, { path: fixture('dense', 2), name: 'b' });
      assert.equal((await ask('b')).status, 200);
      assert.deepEqual(await cached(north), [b.sha256]);
      await north.stop();
      const states = await until(async () => ((await hub.status()).nodes as { state: string }[]).map((n) => n.state), (st) => st.every((x) => x === 'offline'), 30_000);
      assert.deepEqual(states, ['offline'], 'the hub saw the node go');
      assert.equal((await hub.api('/api/models/b', { method: 'DELETE' })).status, 200);
      north = await startNode(hub, { name: 'north', home: north.home, token: null, cpuBudgetMb: 1000, env: ENV });
      assert.deepEqual(await until(() => cached(north), (c) => c.length === 0, 30_000), [], 'evicted once the node is back');
      assert.ok(!onDisk(north, b.sha256));
    } finally {
      await north.stop();
      await hub.stop();
    }
  });
});
