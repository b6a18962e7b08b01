import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { chatConversation, type ChatTurn } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { startLlamaServer } from '../../src/main/core/llama/processes.js';

/**
 * Prefix-aware routing on real llama-server: a hub and a node each hold a 2-slot placement of one model, four
 * conversations go on turn by turn at once (as four people chatting), and every turn after the first finds most
 * of its prompt in the KV cache of the placement it lands on (llama-server's own `cached_tokens`) — because the
 * hub sends it back where its conversation lives. The texts equal one llama-server's, conversation by conversation.
 */
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '2', RELAY_THREADS: '1' };
const SYSTEM = 'You are the household assistant. Answer briefly, in plain words, and say when you do not know.';
const PEOPLE = ['ana', 'ben', 'cleo', 'dev'];
const TURNS = 4;

type Turn = ChatTurn;

/** One conversation, a turn at a time: the whole history is sent again each turn, the answers added to it. */
function conversation(baseUrl: string, who: string): { next(t: number): Promise<Turn> } {
  const c = chatConversation(baseUrl, SYSTEM);
  return { next: (t) => c.say(`${who} asks question number ${t} about the garden`) };
}

describe('conversations stay warm across the pool (prefix-aware routing)', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let node: NodeProcess;
  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
    node = await startNode(hub, { name: 'n1', cpuBudgetMb: 1000, env: ENV });
  });
  after(async () => {
    await node?.stop();
    await hub?.stop();
  });

  it('four interleaved conversations on two placements: each turn after the first mostly cached, texts as one llama-server', async () => {
    // Two placements: three requests at once with no prompt to route by (token ids) need more than one 2-slot placement.
    const warm = (): Promise<Response> =>
      fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', prompt: [1, 2, 3], max_tokens: 64 }) });
    await Promise.all([warm(), warm(), warm()]);
    await until(
      () => hub.status(),
      (s) => s.replicas.filter((r) => r.model === 'm' && r.state === 'ready').length === 2,
      120_000,
    );

    const convs = PEOPLE.map((who) => conversation(hub.url, who));
    const got: Turn[][] = PEOPLE.map(() => []);
    for (let t = 0; t < TURNS; t++) {
      // Each turn in another order (who speaks first changes): least-loaded routing would deal them out afresh.
      const order = PEOPLE.map((_, i) => (i + t) % PEOPLE.length);
      const turns = await Promise.all(order.map((i) => convs[i]!.next(t)));
      turns.forEach((x, k) => got[order[k]!]!.push(x));
    }

    // The oracle: one llama-server, each conversation alone.
    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 1024, slots: 1, cacheType: 'f16', threads: 1 });
    const want: string[][] = [];
    try {
      for (const who of PEOPLE) {
        const c = conversation(direct.baseUrl, who);
        const texts: string[] = [];
        for (let t = 0; t < TURNS; t++) texts.push((await c.next(t)).text);
        want.push(texts);
      }
    } finally {
      await direct.child.terminate(5000);
    }
    assert.deepEqual(
      got.map((c) => c.map((x) => x.text)),
      want,
    );

    for (const [i, c] of got.entries()) {
      for (let t = 1; t < TURNS; t++) {
        const turn = c[t]!;
        assert.ok(turn.cached >= c[t - 1]!.prompt - 2, `${PEOPLE[i]}'s turn ${t}: ${turn.cached} of ${turn.prompt} prompt tokens cached; the turn before had ${c[t - 1]!.prompt}`);
      }
    }
    const st = await hub.status();
    const hits = st.replicas.filter((r) => r.model === 'm').map((r) => r.prefix_hits);
    assert.ok(hits.reduce((a, b) => a + b, 0) >= PEOPLE.length * (TURNS - 1), `prefix hits ${JSON.stringify(hits)}`);
    assert.ok(
      hits.every((h) => h > 0),
      `both placements serve conversations: ${JSON.stringify(hits)}`,
    );
    // /metrics: the prompt tokens llama-server found cached vs evaluated.
    const metrics = await (await fetch(`${hub.url}/metrics`)).text();
    const count = (cache: string): number => Number(new RegExp(`relay_prompt_tokens_total\\{cache="${cache}",model="m"\\} (\\d+)`).exec(metrics)?.[1] ?? NaN);
    const cached = got.flat().reduce((s, x) => s + x.cached, 0);
    const evaluated = got.flat().reduce((s, x) => s + x.prompt - x.cached, 0);
    assert.ok(count('cached') >= cached && count('evaluated') >= evaluated, metrics);
    // The least any pool can evaluate: each first turn whole, then only what each turn added to the one before.
    const minimum = got.reduce((s, c) => s + c[0]!.prompt + c.slice(1).reduce((n, x, t) => n + x.prompt - c[t]!.prompt, 0), 0);
    assert.ok(evaluated <= 1.2 * minimum, `evaluated ${evaluated} prompt tokens, the minimum is ${minimum}`);
  });
});
