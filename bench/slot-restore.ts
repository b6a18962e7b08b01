/**
 * bench/slot-restore (issue #26 item 2, "keep it only if the bench shows it pays"): what a conversation costs on
 * its first turn after its placement was stopped, cold (llama-server evaluates the whole history again) against
 * restored (the slot's KV cache saved with `/slots/0?action=save` before the stop, read back with `restore` after
 * the restart). One llama-server, one slot, `spectarget` (26 layers): per history length, the save's and the
 * restore's own times and file size, the next turn's prompt time both ways, medians of paired rounds.
 * `npm run bench -- slot-restore`.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startLlamaServer, type RunningLlamaServer } from '../src/main/core/llama/index.js';
import { ensureFixture } from '../test/fixtures/models.js';
import { llama } from '../test/helpers/llama.js';
import { median } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const model = ensureFixture('spectarget', { vocabDir: llama().vocabDir });
const dir = mkdtempSync(join(tmpdir(), 'relay-bench-slots-'));

const start = (): Promise<RunningLlamaServer> => startLlamaServer(llama(), { model, ctx: 2048, slots: 1, cacheType: 'f16', threads: THREADS, fit: 'off', slotSavePath: `${dir}/` });

async function post<T>(url: string, body: unknown): Promise<T> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = (await r.json()) as T;
  if (!r.ok) throw new Error(`${url}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}

interface Turn {
  promptMs: number;
  evaluated: number;
  wallMs: number;
}
async function turn(s: RunningLlamaServer, prompt: string): Promise<Turn> {
  const t0 = performance.now();
  const j = await post<{ timings: { prompt_ms: number; prompt_n: number } }>(`${s.baseUrl}/completion`, { prompt, n_predict: 1, temperature: 0, id_slot: 0, cache_prompt: true });
  return { promptMs: j.timings.prompt_ms, evaluated: j.timings.prompt_n, wallMs: performance.now() - t0 };
}

const history = (words: number, round: number): string => Array.from({ length: words }, (_, i) => `w${(i * 7 + round) % 97}`).join(' ');
const rows: string[] = [
  '| history (tokens) | KV file | save | restore | next turn cold: prompt ms (evaluated) | restored: restore + prompt ms (evaluated) | restored ÷ cold |',
  '| --- | --- | --- | --- | --- | --- | --- |',
];
let server = await start();
try {
  for (const words of [60, 200, 600]) {
    const cold: number[] = [];
    const warm: number[] = [];
    const saves: number[] = [];
    const restores: number[] = [];
    let size = 0;
    let tokens = 0;
    let evalCold = 0;
    let evalWarm = 0;
    for (let r = 0; r < ROUNDS; r++) {
      const past = history(words, r);
      const next = `${past} and then the next question ${r}`;
      // The conversation so far, served and saved; then the placement stops (a restart here).
      tokens = (await turn(server, past)).evaluated;
      const file = `c${words}-${r}.bin`;
      const saved = await post<{ timings: { save_ms: number } }>(`${server.baseUrl}/slots/0?action=save`, { filename: file });
      saves.push(saved.timings.save_ms);
      size = statSync(join(dir, file)).size;
      await server.child.terminate(5000);
      server = await start();
      // Restored: read the slot back, then the next turn.
      const t0 = performance.now();
      await post(`${server.baseUrl}/slots/0?action=restore`, { filename: file });
      const restoreMs = performance.now() - t0;
      restores.push(restoreMs);
      const w = await turn(server, next);
      warm.push(restoreMs + w.promptMs);
      evalWarm = w.evaluated;
      // Cold: the same next turn on a fresh server.
      await server.child.terminate(5000);
      server = await start();
      const c = await turn(server, next);
      cold.push(c.promptMs);
      evalCold = c.evaluated;
      rmSync(join(dir, file), { force: true });
    }
    rows.push(
      `| ${tokens} | ${(size / 1048576).toFixed(1)} MiB | ${median(saves).toFixed(1)} ms | ${median(restores).toFixed(1)} ms | ${median(cold).toFixed(1)} (${evalCold}) | ${median(warm).toFixed(1)} (${evalWarm}) | ${(median(warm) / median(cold)).toFixed(2)} |`,
    );
  }
} finally {
  await server.child.terminate(5000);
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\nslot-restore: spectarget (26 layers, n_embd 256, f16 KV), 1 slot, ${THREADS} thread(s), ${ROUNDS} rounds; restore timed at the client\n`);
for (const r of rows) console.log(r);
