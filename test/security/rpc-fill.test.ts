import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { hubConfigFromEnv } from '../../src/main/core/config.js';
import { GGML_TYPE_F32 } from '../../src/main/core/gguf/index.js';
import { startHub, type Hub } from '../../src/main/core/hub/index.js';
import { createLogger } from '../../src/main/core/log.js';
import { RPC_HASH_THRESHOLD } from '../../src/main/core/llama/rpc-tensors.js';
import { str, u32, writeSparseGguf } from '../fixtures/gguf-writer.js';
import { llama } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';

/**
 * The case: filling ggml-rpc-server's cache from a multi-GB model used to hash on the node's event loop
 * (~136 MiB/s), so the tunnel's keep-alive went unanswered and the node dropped mid-fill. Here a `relay up`
 * process fills its cache from a 5 GiB GGUF (sparse on disk, every byte still read, hashed and written) while
 * the hub pings it through the tunnel: the pings are answered during the fill and the session never drops.
 */
describe('a 5 GiB rpc-cache fill keeps the tunnel up', { timeout: 600_000 }, () => {
  const log = createLogger({ level: 'warn', pretty: false });
  const LAYERS = 20;
  const TENSOR_DIMS = [65536, 1024]; // F32: 256 MiB each
  const sha = 'c0ffee'.padEnd(64, '0');
  let hub: Hub;
  let node: NodeProcess;
  let nodeHome: string;
  let size = 0;

  before(async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-hub-'));
    hub = await startHub(hubConfigFromEnv({ HOME: tmpdir() }, { port: 0, home }), { log, install: llama() });
    nodeHome = mkdtempSync(join(tmpdir(), 'relay-node-vault-'));
    // The node already holds the model (as after a push): the file sits in its cache under the model's sha256.
    const models = join(nodeHome, 'cache', 'models');
    mkdirSync(models, { recursive: true });
    const tensors = Array.from({ length: LAYERS }, (_, i) => ({ name: `blk.${i}.ffn_up.weight`, dims: TENSOR_DIMS, type: GGML_TYPE_F32 }));
    const path = join(models, `${sha}.gguf`);
    size = writeSparseGguf(
      path,
      [
        ['general.architecture', str('llama')],
        ['llama.block_count', u32(LAYERS)],
      ],
      tensors,
    );
    // ... and the hub owns it (a node's copy of a model the hub does not have is evicted when it connects).
    // Recorded directly: hashing 5 GiB to register it is not what this test is about.
    await hub.store.update((data) => {
      data.models.push({
        name: 'vault-model',
        path,
        sha256: sha,
        size,
        mtimeMs: 0,
        required_vram_mb: null,
        arch: 'llama',
        block_count: LAYERS,
        kv_bytes_per_token: 0,
        expert_count: 0,
        expert_used_count: 0,
        context_length: 0,
        embedding: false,
        added_at: new Date().toISOString(),
      });
    });
    node = await startNode({ url: hub.url, home }, { name: 'vault', home: nodeHome });
  });
  after(async () => {
    await node?.stop();
    await hub?.close();
    if (nodeHome) rmSync(nodeHome, { recursive: true, force: true });
  });

  it('the node answers pings throughout, stays connected, and caches every tensor', async () => {
    assert.ok(size > 5 * 1024 ** 3, `the model is ${size} bytes`);
    const conn = hub.nodes.get('vault')!;
    assert.ok(conn, 'the node is connected');
    let filling = true;
    const fill = conn.command({ type: 'fill-rpc-cache', sha256: sha }, 10 * 60_000).finally(() => (filling = false));
    let answeredDuringFill = 0;
    const pinger = (async () => {
      while (filling) {
        await conn.session.ping(20_000); // the node's own keep-alive timeout
        if (filling) answeredDuringFill++;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const reply = await fill;
    await pinger;
    assert.equal(reply.ok, true, JSON.stringify(reply));
    assert.ok(answeredDuringFill >= 3, `the node answered ${answeredDuringFill} pings while it filled`);
    assert.equal(hub.nodes.get('vault'), conn, 'the same session throughout: the node never dropped');
    assert.equal(conn.session.closed, false);
    assert.ok(!node.logs.some((l) => /lost the hub/.test(l)), 'the node never lost the hub');
    const data = reply.data as { files: number; bytes: number };
    assert.equal(data.files, LAYERS);
    assert.equal(data.bytes, LAYERS * 256 * 1024 * 1024);
    const dir = join(nodeHome, 'cache', 'llama', 'rpc');
    const files = readdirSync(dir).filter((f) => /^[0-9a-f]{16}$/.test(f));
    assert.equal(files.length, LAYERS, 'one file per tensor, each named by its own hash');
    for (const f of files) assert.equal(statSync(join(dir, f)).size, 256 * 1024 * 1024);
    assert.ok(256 * 1024 * 1024 > RPC_HASH_THRESHOLD);
  });
});
