import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { shapedLink, type ShapedLink } from '../helpers/shaped-link.js';

/**
 * A push must not make a healthy node look dead. A laptop on weak Wi-Fi (a 16 Mbit/s link, 5 ms each way, a
 * 256 KiB bottleneck queue, emulated in user space) runs model `m`; the hub pushes it a second model (36 MB,
 * about 18 s on that link) and, while the push fills the link, a client streams from `m`. The stream's request
 * and the hub's pings travel behind the push's bytes: the stream must complete with the text a bare llama-server
 * gives, the push must finish without starting over, and the node must stay connected throughout.
 */
const ENV = { RELAY_CONTEXT_SIZE: '2048', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';
const sha256 = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

describe('a weight push over a slow link', { timeout: 300_000 }, () => {
  let hub: HubProcess;
  let link: ShapedLink;
  let node: NodeProcess;
  let c: OpenAI;
  let want: string;
  before(async () => {
    want = (await directTexts(fixture('dense'), [PROMPT], 48))[0]!;
    hub = await startHub({ env: ENV });
    link = await shapedLink(hub.url, { mbitPerSec: 16, delayMs: 5, queueBytes: 256 * 1024 });
    await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
    await addModel(hub, { path: fixture('dense', 2), name: 'pushed', required_vram_mb: 300 });
    // The node already holds m (its cache filled earlier): only the second model crosses the slow link.
    const home = mkdtempSync(join(tmpdir(), 'relay-node-slow-'));
    mkdirSync(join(home, 'cache', 'models'), { recursive: true });
    symlinkSync(fixture('dense'), join(home, 'cache', 'models', `${sha256(fixture('dense'))}.gguf`));
    node = await startNode({ url: link.url, home: hub.home }, { name: 'laptop', cpuBudgetMb: 4000, env: ENV, home });
    c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const r = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 48, ...GREEDY_EXTRA });
    assert.equal(r.choices[0]!.text, want, 'm runs on the laptop');
  });
  after(async () => {
    await node?.stop();
    await link?.close();
    await hub?.stop();
  });

  it('a stream from the node completes while a push fills its link, and the push is not restarted', async () => {
    try {
      const connects = hub.logs.filter((l) => l.includes('"msg":"node connected"')).length;
      const pushed = c.completions.create({ model: 'pushed', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA });
      // The push has filled the link's queue and the sender's buffers behind it: a few MB wait ahead of anything new.
      const seen = await until(
        async () => (await hub.status()).pushes.find((p) => p.node === 'laptop' && p.done > 8 * 1024 * 1024),
        (x) => x !== undefined,
        60_000,
      );
      assert.ok(seen, 'the push is under way');
      const stream = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 48, stream: true, ...GREEDY_EXTRA });
      let text = '';
      for await (const ch of stream) text += ch.choices[0]?.text ?? '';
      assert.equal(text, want, 'the whole answer, as a bare llama-server gives it');
      const st = await hub.status();
      assert.ok(
        st.pushes.some((p) => p.node === 'laptop'),
        'the push was still running when the stream ended (the stream shared the link with it)',
      );
      const r = await pushed;
      assert.ok(r.choices[0]!.text.length > 0, 'the pushed model answers');
      assert.equal(hub.logs.filter((l) => l.includes('"msg":"node connected"')).length, connects, 'the node stayed connected');
      assert.equal(hub.logs.filter((l) => l.includes('node disconnected')).length, 0, 'no disconnect');
      assert.equal(hub.logs.filter((l) => l.includes('"msg":"pushing weights"')).length, 1, 'one push, from zero once');
      assert.equal(hub.logs.filter((l) => l.includes('resuming weight push')).length, 0, 'never resumed after a drop');
    } catch (err) {
      console.log(`--- hub log ---\n${hub.logs.slice(-60).join('\n')}\n--- node log ---\n${node.logs.slice(-30).join('\n')}`);
      throw err;
    }
  });
});
