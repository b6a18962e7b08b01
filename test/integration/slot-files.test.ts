import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { describe as describeModel } from '../../src/main/core/models/describe.js';
import { SlotKeeper, type SlotLayout } from '../../src/main/core/scheduler/slots/slot-keep.js';
import { NodeSlots } from '../../src/main/core/node/work/slots.js';
import { idleSlotTokens } from '../../src/main/core/llama/slot-state.js';
import { fixture, llama } from '../helpers/llama.js';
import { complete } from '../helpers/openai.js';

/**
 * The files of kept slots (slot-keep.ts) with a real llama-server: their folder is the hub user's alone, and a
 * state larger than the budget is never written — its size is estimated from the slots' tokens and the model's KV
 * per token before a byte goes to disk (it used to be written, found too big, and deleted: gigabytes each time).
 */
describe('kept slot files', { timeout: 120_000 }, () => {
  let dir: string;
  let server: RunningLlamaServer;
  let layout: SlotLayout;
  const log = pino({ level: 'silent' });

  before(async () => {
    dir = join(mkdtempSync(join(tmpdir(), 'relay-slots-')), 'slots');
    mkdirSync(dir);
    const d = await describeModel(fixture('dense'));
    layout = { sha256: d.sha256, ctx: 512, slots: 1, cacheType: 'f16', bytesPerToken: d.kv_bytes_per_token };
    server = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1, slotSavePath: `${dir}/` });
    await complete(server.baseUrl, 'The garden in spring has roses, tulips and a small pond where frogs sing at night', 4);
  });
  after(async () => {
    await server?.child.terminate(5000);
    rmSync(join(dir, '..'), { recursive: true, force: true });
  });

  it('the folder is 0700', () => {
    new SlotKeeper({ dir, budgetBytes: 1 << 20, log, now: Date.now });
    assert.equal(statSync(dir).mode & 0o777, 0o700);
  });

  it('a state over the budget is not written at all; one within it is, about the size estimated', async () => {
    const created: string[] = [];
    const tight = new SlotKeeper({ dir, budgetBytes: 4096, log, now: Date.now });
    const watcher = watch(dir, (_event, name) => name && created.push(name));
    try {
      assert.equal(await tight.save('m', 'p1', layout, server.baseUrl), false);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(created, [], 'no file was written');
    } finally {
      watcher.close();
    }
    const roomy = new SlotKeeper({ dir, budgetBytes: 1 << 20, log, now: Date.now });
    assert.equal(await roomy.save('m', 'p2', layout, server.baseUrl), true);
    const [file] = readdirSync(dir);
    const slots = (await (await fetch(`${server.baseUrl}/slots`)).json()) as { n_prompt_tokens: number }[];
    const estimate = slots[0]!.n_prompt_tokens * (layout.bytesPerToken! + 4);
    const written = statSync(join(dir, file!)).size;
    assert.ok(written <= estimate * 1.1 && written >= estimate * 0.5, `written ${written} bytes, estimated ${estimate}`);
  });

  it("a stale save's discard drops only what it kept: a newer save of another replica stays", async () => {
    const keeper = new SlotKeeper({ dir, budgetBytes: 1 << 20, log, now: Date.now });
    assert.equal(await keeper.save('m', 'p3', layout, server.baseUrl), true);
    assert.equal(await keeper.save('m', 'p4', layout, server.baseUrl), true); // a second replica of m, idle later
    keeper.drop('m', 'p3'); // p3 was served meanwhile: its save is stale
    assert.equal(keeper.keptFrom('m'), 'p4');
    assert.ok(
      readdirSync(dir).some((f) => f.startsWith('p4-')),
      'its files are there',
    );
    keeper.drop('m', 'p4');
    assert.equal(keeper.keptFrom('m'), null);
    assert.equal(readdirSync(dir).filter((f) => f.startsWith('p3-') || f.startsWith('p4-')).length, 0);
  });

  it("a moved answer's take-in reads only the state its own placement kept; another stays for the next replica", async () => {
    const keeper = new SlotKeeper({ dir, budgetBytes: 1 << 20, log, now: Date.now });
    assert.equal(await keeper.save('m', 'p5', layout, server.baseUrl), true); // an idle conversation kept at its keep-alive
    assert.equal(await keeper.restore('m', layout, server.baseUrl, 0, 'p9'), null, "the answer came from p9: not p5's state");
    assert.equal(await keeper.restore('m', { ...layout, ctx: 1024 }, server.baseUrl, 0, 'p5'), null, 'nor into another layout');
    assert.equal(keeper.keptFrom('m'), 'p5', 'left for the model');
    const restored = await keeper.restore('m', layout, server.baseUrl, 0, 'p5');
    assert.equal(restored?.from, 'p5');
    assert.ok(restored.bytes > 0);
    assert.equal(keeper.keptFrom('m'), null);
  });
});

/**
 * A node's kept conversations (node/work/slots.ts) with a real llama-server: saved when a replica stops, listed with
 * their size and sha256, and what waits for the hub stays within the hub's budget, all replicas together.
 */
describe("a node's kept slots", { timeout: 120_000 }, () => {
  let root: string;
  let slots: NodeSlots;
  let server: RunningLlamaServer;
  const log = pino({ level: 'silent' });

  before(async () => {
    root = mkdtempSync(join(tmpdir(), 'relay-node-slots-'));
    slots = new NodeSlots({ dir: join(root, 'slots'), log });
    server = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1, slotSavePath: slots.savePath });
    await complete(server.baseUrl, 'The garden in spring has roses, tulips and a small pond where frogs sing at night', 4);
  });
  after(async () => {
    await server?.child.terminate(5000);
    rmSync(root, { recursive: true, force: true });
  });

  it('saves what a slot holds, hashed; the oldest state goes when two exceed the budget; one alone over it is not kept', async () => {
    assert.equal(statSync(join(root, 'slots')).mode & 0o777, 0o700);
    const [first] = await slots.save('r1', server.baseUrl, 1 << 20);
    assert.ok(first && first.bytes > 0);
    assert.equal(
      first.sha256,
      createHash('sha256')
        .update(readFileSync(join(root, 'slots', 'r1-0.bin')))
        .digest('hex'),
    );
    assert.deepEqual(slots.list('r1'), [first]);
    // Room for one state, not two: r1's goes when r2's is kept.
    assert.equal((await slots.save('r2', server.baseUrl, Math.floor(first.bytes * 1.5))).length, 1);
    assert.deepEqual(slots.list('r1'), []);
    assert.deepEqual(readdirSync(join(root, 'slots')), ['r2-0.bin']);
    // Over the budget alone: nothing kept, nothing left on disk.
    assert.deepEqual(await slots.save('r3', server.baseUrl, 16), []);
    assert.deepEqual(readdirSync(join(root, 'slots')), ['r2-0.bin']);
  });
});

/**
 * The record of a yielded answer (issue #54): the hub cancels the answer by closing its connection, and reads the
 * slot's tokens at once. llama-server notices the cancel only at the answer's next token, so a `/slots` asked at
 * once can still show the slot generating: the read waits until at most `busy` slots generate, and the record
 * holds the prompt and every token the client had.
 */
describe("a yielded answer's record", { timeout: 120_000 }, () => {
  let dir: string;
  let server: RunningLlamaServer;

  before(async () => {
    dir = join(mkdtempSync(join(tmpdir(), 'relay-yield-')), 'slots');
    mkdirSync(dir, { recursive: true });
    server = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 1024, slots: 1, cacheType: 'f16', threads: 1, slotSavePath: `${dir}/` });
  });
  after(async () => {
    await server?.child.terminate(5000);
    rmSync(join(dir, '..'), { recursive: true, force: true });
  });

  it('read the moment the answer is cancelled: its slot’s prompt and every token sent', async () => {
    const stop = new AbortController();
    const r = await fetch(`${server.baseUrl}/completion`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Tell me a long story about the sea', n_predict: 800, ignore_eos: true, temperature: 0, stream: true, return_tokens: true }),
      signal: stop.signal,
    });
    let sent = 0;
    let prompt = 0;
    const reader = r.body!.getReader();
    let buf = '';
    while (sent < 40) {
      const { value } = await reader.read();
      buf += new TextDecoder().decode(value);
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines.filter((x) => x.startsWith('data: '))) {
        const ev = JSON.parse(l.slice(6)) as { tokens?: number[]; tokens_evaluated?: number };
        sent += ev.tokens?.length ?? 0;
        prompt = ev.tokens_evaluated ?? prompt;
      }
    }
    stop.abort();
    const [record] = await idleSlotTokens(server.baseUrl, dir, 'yield-test', 0);
    assert.ok(record, 'the slot was read once its answer stopped');
    assert.ok(record.tokens.length >= prompt + sent, `${record.tokens.length} tokens held; the prompt was ${prompt}, ${sent} were sent`);
    assert.deepEqual(readdirSync(dir), [], 'the state file read is gone');
  });
});
