import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { addModel, startHub } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
const cacheCli = (n: NodeProcess, ...args: string[]) => run(process.execPath, [relay, 'cache', ...args, '--home', n.home]);

/**
 * Node disk hygiene with real hub and node processes: a model removed from the hub leaves every node's cache
 * (at once when the node is connected, on its next connection when it is away), unless another registered name
 * still uses the same file; `relay cache ls|prune` on the node; `relay status` reading the pool like a person.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

const cached = async (n: NodeProcess): Promise<string[]> => (((await n.local('/status')) as { cache?: { sha256: string }[] }).cache ?? []).map((c) => c.sha256);
const onDisk = (n: NodeProcess, sha256: string): boolean => existsSync(join(n.home, 'cache', 'models', `${sha256}.gguf`));

describe("node caches follow the hub's models", { timeout: 300_000 }, () => {
  it('removing a model evicts it from the node now, or when the node next connects; a file another name uses stays', async () => {
    const hub = await startHub({ env: ENV }); // no device of its own: every placement is on the node
    let north = await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV });
    try {
      const a = await addModel(hub, { path: fixture('dense'), name: 'a' });
      const alias = await addModel(hub, { path: fixture('dense'), name: 'a-alias' });
      assert.equal(alias.sha256, a.sha256, 'two names, one file');
      const ask = (model: string) =>
        fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }) });
      assert.equal((await ask('a')).status, 200);
      assert.deepEqual(await cached(north), [a.sha256]);
      assert.ok(onDisk(north, a.sha256), 'the node holds the pushed file where its cache says');

      // One of two names removed: the file still backs the other.
      assert.equal((await hub.api('/api/models/a', { method: 'DELETE' })).status, 200);
      assert.deepEqual(await cached(north), [a.sha256]);
      // The last name removed: the node's copy goes before the DELETE answers.
      assert.equal((await hub.api('/api/models/a-alias', { method: 'DELETE' })).status, 200);
      assert.deepEqual(await cached(north), []);
      assert.ok(!onDisk(north, a.sha256), "the file is gone from the node's disk");

      // Removed while the node is away: evicted when it comes back.
      const b = await addModel(hub, { path: fixture('dense', 2), name: 'b' });
      assert.equal((await ask('b')).status, 200);
      assert.deepEqual(await cached(north), [b.sha256]);
      await north.stop();
      const states = await until(
        async () => (await hub.status()).nodes.map((n) => n.state),
        (st) => st.every((x) => x === 'offline'),
        30_000,
      );
      assert.deepEqual(states, ['offline'], 'the hub saw the node go');
      assert.equal((await hub.api('/api/models/b', { method: 'DELETE' })).status, 200);
      // A push of a model the hub no longer has, cut before it finished: the partial file never resumes.
      const orphan = join(north.home, 'cache', 'partial', `${'ab'.repeat(32)}.part`);
      writeFileSync(orphan, Buffer.alloc(4096, 7));
      north = await startNode(hub, { name: 'north', home: north.home, token: null, cpuBudgetMb: 1000, env: ENV });
      assert.ok(
        await until(
          () => !existsSync(orphan),
          (gone) => gone,
          30_000,
        ),
        'the stale partial push is reclaimed at hello',
      );
      assert.deepEqual(
        await until(
          () => cached(north),
          (c) => c.length === 0,
          30_000,
        ),
        [],
        'evicted once the node is back',
      );
      assert.ok(!onDisk(north, b.sha256));

      // relay cache ls / prune on the node: a file a replica uses is kept, the rest goes; offline too.
      const c = await addModel(hub, { path: fixture('dense', 3), name: 'c' });
      assert.equal((await ask('c')).status, 200);
      // relay status reads the same pool as a person would.
      const st = (await run(process.execPath, [relay, 'status', '--hub', hub.url])).stdout;
      assert.match(st, /MACHINES\n\s+NODE\s+STATE\s+LINK\s+REASON\n\s+north\s+(idle|busy)\s+[\d.]+ ms/, st);
      assert.match(st, /north\s+CPU\s+.*\d+ of 1000 MB free/, st);
      assert.match(st, /\n\s+c\s+replica\s+north\s+CPU\s+ready\s+0\/1\s+512/, st);
      assert.match(st, /MODELS\n\s+MODEL\s+SIZE\s+NEEDS\s+NOW\n\s+c\s+34\.2 MB\s+\d+ MB\s+available/, st);
      const ls = await cacheCli(north, 'ls');
      assert.match(ls.stdout, new RegExp(`${c.sha256.slice(0, 12)}\\s+34\\.2 MB\\s+\\S+\\s+yes`), ls.stdout);
      assert.match(ls.stdout, /budget auto \(half of the free disk and the cache\)/);
      const busy = JSON.parse((await cacheCli(north, 'prune', '--json')).stdout) as { removed: unknown[]; kept: { sha256: string; why: string }[] };
      assert.deepEqual([busy.removed, busy.kept.map((k) => [k.sha256, k.why])], [[], [[c.sha256, 'in use']]]);
      await north.stop(); // its replica stops with it; the cache stays
      const offline = JSON.parse((await cacheCli(north, 'ls', '--json')).stdout) as { files: { sha256: string; in_use: boolean }[] };
      assert.deepEqual(
        offline.files.map((f) => [f.sha256, f.in_use]),
        [[c.sha256, false]],
      );
      const pruned = await cacheCli(north, 'prune');
      assert.match(pruned.stdout, /removed 1 model file\(s\) and 0 partial push\(es\): 34\.2 MB freed/);
      assert.ok(!onDisk(north, c.sha256));
    } finally {
      await north.stop();
      await hub.stop();
    }
  });
});
