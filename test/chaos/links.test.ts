import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { assertCacheIntact, assertNoStrays, assertStoreIntact, linkProxy, type LinkProxy } from '../helpers/chaos.js';
import { slowDisk, type SlowDisk } from '../helpers/slowfs.js';

/**
 * Silent drops, found in seconds. A hub with no device of its own and two node processes: `n1` reaches the hub
 * through a link proxy, `n2` directly. n1 is made to go silent the three ways a household's machines do — its
 * agent stopped (SIGSTOP: a laptop lid closed, a PC asleep), killed (SIGKILL), or its link dead (the proxy stops
 * forwarding without closing: Wi-Fi gone) — at four moments: before a request's first byte, mid-stream, while
 * its replica loads (its copy on a slow disk) and mid-push. Each time: the request completes from n2 or ends
 * with a clean error, the hub's log says the stall probe found the node (not the 15 s keep-alive), the next
 * request is served, and once n1 is back no llama-server runs that the hub does not list; the store and both
 * caches are intact. The time from the fault to the outcome is printed (the soak benchmark reports it).
 */
const ENV = { RELAY_CONTEXT_SIZE: '2048', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';
const sha256 = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');
type Fault = 'agent SIGSTOP' | 'agent SIGKILL' | 'link blackhole';

describe('a node that goes silent', { timeout: 900_000 }, () => {
  let disk: SlowDisk;
  let want: string;
  before(async () => {
    disk = await slowDisk(dirname(fixture('dense', 3)), 8 * 1024 * 1024); // the slow-load model: ~4.5 s
    want = (await directTexts(fixture('dense'), [PROMPT], 24))[0]!;
  });
  after(async () => {
    await disk?.close();
  });

  for (const fault of ['agent SIGSTOP', 'link blackhole', 'agent SIGKILL'] as Fault[]) {
    describe(fault, () => {
      let hub: HubProcess;
      let proxy: LinkProxy;
      let n1: NodeProcess;
      let n2: NodeProcess;
      let c: OpenAI;
      let n1Home: string;
      const nodes = (): NodeProcess[] => [n1, n2];
      const startN1 = async (): Promise<void> => {
        // Room for every model of the test at once: n1 is always the first choice (the most free, or the file).
        n1 = await startNode({ url: proxy.url, home: hub.home }, { name: 'n1', cpuBudgetMb: 4000, env: ENV, home: n1Home, token: n1 ? null : undefined });
      };
      before(async () => {
        // Pushes paced at 16 MiB/s (a home network): a push lasts long enough to fail in the middle of.
        hub = await startHub({ env: { ...ENV, RELAY_PUSH_MAX_MBPS: '16' } });
        proxy = await linkProxy(hub.url);
        await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
        await addModel(hub, { path: fixture('dense', 2), name: 'pushed', required_vram_mb: 300 });
        await addModel(hub, { path: fixture('dense', 3), name: 'slow', required_vram_mb: 300 });
        // n1's copy of "slow" is on the slow disk (as if its cache folder were on a USB disk).
        n1Home = mkdtempSync(join(tmpdir(), 'relay-node-n1-'));
        mkdirSync(join(n1Home, 'cache', 'models'), { recursive: true });
        symlinkSync(join(disk.dir, basename(fixture('dense', 3))), join(n1Home, 'cache', 'models', `${sha256(fixture('dense', 3))}.gguf`));
        await startN1(); // the most room: chosen first
        n2 = await startNode(hub, { name: 'n2', cpuBudgetMb: 800, env: ENV });
        c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
        // n1 serves m first (pushed and loaded there).
        const r = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
        assert.equal(r.choices[0]!.text, want);
      });
      after(async () => {
        await proxy?.close();
        for (const n of [n1, n2]) await n?.stop();
        await hub?.stop();
      });

      /** it(), with the hub's and n1's last log lines printed when the test fails (what a fault did is in them). */
      const itLogged = (name: string, fn: () => Promise<void>): void => {
        it(name, async () => {
          try {
            await fn();
          } catch (err) {
            console.log(`--- hub log ---\n${hub.logs.slice(-80).join('\n')}\n--- n1 log ---\n${n1.logs.slice(-60).join('\n')}`);
            throw err;
          }
        });
      };
      let faultAt = 0;
      const breakN1 = (): void => {
        faultAt = Date.now();
        if (fault === 'agent SIGSTOP') n1.proc.kill('SIGSTOP');
        else if (fault === 'agent SIGKILL') n1.proc.kill('SIGKILL');
        else proxy.blackhole();
      };
      const since = (): string => `${((Date.now() - faultAt) / 1000).toFixed(1)} s after the fault`;
      /** The hub found n1 by a probe (stall, command or push watch), not its keep-alive, unless n1 died outright. */
      const foundByProbe = (): void => {
        if (fault === 'agent SIGKILL') return; // the connection closes at once: nothing to find
        assert.ok(
          hub.logs.some((l) => l.includes('node disconnected') && l.includes('did not answer a ping within 2000 ms')),
          'the stall probe found the silent node',
        );
      };
      /** n1 back (continued, link healed, or restarted), the pool settled, nothing left behind. */
      const recover = async (models: string[]): Promise<void> => {
        if (fault === 'agent SIGSTOP') n1.proc.kill('SIGCONT');
        else if (fault === 'link blackhole') proxy.heal();
        else await startN1();
        await until(
          async () => (await hub.status()).nodes.find((n) => n.name === 'n1')?.connected,
          (x) => x === true,
          60_000,
        );
        const next = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
        assert.equal(next.choices[0]!.text, want, 'the next request is served');
        await assertNoStrays(hub, nodes());
        await assertStoreIntact(hub, models);
        for (const n of nodes()) assertCacheIntact(n);
        hub.logs.length = 0;
      };

      itLogged('before the first byte: the request that landed on the silent node is answered by another', async () => {
        breakN1(); // n1 is silent; the hub does not know yet, and its ready replica has the free slot
        const r = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 24, ...GREEDY_EXTRA });
        console.log(`# ${fault}, before the first byte: answered ${since()}`);
        assert.equal(r.choices[0]!.text, want);
        foundByProbe();
        await recover(['m']);
      });

      itLogged('mid-stream: the stream ends with its error event in seconds; the next request is served', async () => {
        await n2.local('/pause', 'POST'); // the stream goes through n1 (its owner took n2 back for a moment)
        await until(
          async () => (await hub.status()).nodes.find((n) => n.name === 'n2')?.state,
          (x) => x === 'paused',
        );
        const stream = await c.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 1800, stream: true, ...GREEDY_EXTRA });
        let chunks = 0;
        let outcome: 'done' | 'error' = 'done';
        try {
          for await (const ch of stream) {
            if ((ch.choices[0]?.text ?? '') !== '' && ++chunks === 3) breakN1();
          }
        } catch {
          outcome = 'error';
        }
        console.log(`# ${fault}, mid-stream: the stream ended (${outcome}) ${since()}`);
        assert.equal(outcome, 'error', 'an SSE error event, never a silent hang or a truncated "done"');
        foundByProbe();
        await n2.local('/resume', 'POST');
        await recover(['m']);
      });

      itLogged("mid-load: a request waiting on n1's loading replica is answered by another placement", async () => {
        const req = c.completions.create({ model: 'slow', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA });
        const seen = await until(
          async () => (await hub.status()).replicas.find((r) => r.model === 'slow' && r.node === 'n1' && r.load !== null),
          (x) => x !== undefined,
          30_000,
        );
        assert.ok(seen, `n1 loads its copy on the slow disk: ${JSON.stringify(await hub.status())}\n${hub.logs.slice(-40).join('\n')}`);
        breakN1();
        const r = await req;
        console.log(`# ${fault}, mid-load: answered ${since()}`);
        assert.ok(r.choices[0]!.text.length > 0);
        assert.ok(
          (await hub.status()).replicas.some((x) => x.model === 'slow' && x.node === 'n2' && x.state === 'ready'),
          'by n2',
        );
        foundByProbe();
        await recover(['m', 'slow']);
      });

      if (fault !== 'agent SIGKILL') {
        itLogged('idle: with nothing waiting on it, the keep-alive takes the silent node out of the pool', async () => {
          await assertNoStrays(hub, nodes()); // nothing in flight anywhere
          breakN1();
          const gone = await until(
            () => hub.logs.find((l) => l.includes('node disconnected') && l.includes('"node":"n1"')),
            (l) => l !== undefined,
            30_000,
          );
          console.log(`# ${fault}, idle: out of the pool ${since()}`);
          assert.match(gone ?? '', /did not answer a ping within 10000 ms/, "the keep-alive's 10 s, after at most 5 s between pings");
          await recover(['m', 'slow']);
        });
      }

      itLogged('mid-push: the push fails in seconds and the request is answered by another node', async () => {
        const req = c.completions.create({ model: 'pushed', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA });
        const seen = await until(
          async () => (await hub.status()).pushes.find((p) => p.node === 'n1' && p.done > 0),
          (x) => x !== undefined,
          30_000,
        );
        assert.ok(seen, `a push to n1 is under way: ${JSON.stringify(await hub.status())}\n${hub.logs.slice(-40).join('\n')}`);
        breakN1();
        const r = await req;
        console.log(`# ${fault}, mid-push: answered ${since()}`);
        assert.ok(r.choices[0]!.text.length > 0);
        assert.ok(
          (await hub.status()).replicas.some((x) => x.model === 'pushed' && x.node === 'n2' && x.state === 'ready'),
          'by n2',
        );
        foundByProbe();
        await recover(['m', 'slow', 'pushed']);
      });
    });
  }
});
