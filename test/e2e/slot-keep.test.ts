import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { chatConversation, type ChatTurn } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { startLlamaServer } from '../../src/main/core/llama/processes.js';

/**
 * A conversation outlives its replica's keep-alive (slot-keep.ts): the idle host replica saves its slot before it
 * stops, the next replica of the model restores it before its first request, and the next turn finds its history
 * in the KV cache (llama-server's own `cached_tokens`). The answers equal one llama-server's that never stopped.
 * A damaged kept file, and RELAY_SLOT_KEEP_MB=0, mean a cold start with the same answers.
 */
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_KEEP_ALIVE_MS: '500' };
const SYSTEM = 'You are the household assistant. Answer briefly, in plain words, and say when you do not know. '.repeat(4);
const QUESTIONS = ['what grows in the garden in May', 'and what should be planted next to the tomatoes', 'how often do they need water'];

type Turn = ChatTurn;

function conversation(baseUrl: string): { next(t: number): Promise<Turn> } {
  const c = chatConversation(baseUrl, SYSTEM);
  return { next: (t) => c.say(QUESTIONS[t]!) };
}

/** The replica has stopped for its keep-alive (the test waits for the hub to say so). */
const stopped = (hub: HubProcess): Promise<unknown> =>
  until(
    () => hub.status(),
    (s) => !s.replicas.some((r) => r.model === 'm'),
    60_000,
  );
const kept = (hub: HubProcess): string[] => readdirSync(join(hub.home, 'slots')).filter((f) => f.endsWith('.bin'));

describe('conversations kept across the keep-alive (slot save and restore)', { timeout: 300_000 }, () => {
  let hub: HubProcess;
  let oracle: string[];
  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
    // The oracle: one llama-server that never stops, the same conversation.
    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 1024, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      const c = conversation(direct.baseUrl);
      oracle = [];
      for (let t = 0; t < QUESTIONS.length; t++) oracle.push((await c.next(t)).text);
    } finally {
      await direct.child.terminate(5000);
    }
  });
  after(async () => {
    await hub?.stop();
  });

  it('each turn after a stop finds the history cached; a damaged kept file starts cold with the same answers', async () => {
    const c = conversation(hub.url);
    const first = await c.next(0);
    await stopped(hub);
    assert.equal(kept(hub).length, 1, 'the idle replica saved its one slot');

    const second = await c.next(1);
    assert.equal(second.text, oracle[1]);
    assert.ok(second.cached >= first.prompt - 2, `turn 2: ${second.cached} of ${second.prompt} prompt tokens cached after the restart; turn 1 had ${first.prompt}`);
    assert.deepEqual(kept(hub), [], 'a restored file is removed');

    await stopped(hub);
    for (const f of kept(hub)) writeFileSync(join(hub.home, 'slots', f), Buffer.alloc(4096, 7));
    const third = await c.next(2);
    assert.equal(third.text, oracle[2]);
    assert.ok(third.cached <= 2, `a damaged state is not used: ${third.cached} cached`);
    assert.ok(
      hub.logs.some((l) => l.includes('could not restore kept slots')),
      'the failed restore is logged',
    );
    assert.equal(first.text, oracle[0]);
  });

  it('RELAY_SLOT_KEEP_MB=0 keeps nothing: the turn after a stop is evaluated whole', async () => {
    const off = await startHub({ env: { ...ENV, RELAY_SLOT_KEEP_MB: '0' }, args: ['--cpu-budget-mb', '1000'] });
    try {
      await addModel(off, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
      const c = conversation(off.url);
      await c.next(0);
      await stopped(off);
      const second = await c.next(1);
      assert.equal(second.text, oracle[1]);
      assert.ok(second.cached <= 2, `nothing kept, ${second.cached} cached`);
    } finally {
      await off.stop();
    }
  });
});
