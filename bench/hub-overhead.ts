/**
 * bench/hub-overhead: generation tok/s and time-to-first-token through the hub vs direct llama-server.
 * Same model, prompts and settings; requests interleaved (direct, hub, hub, direct, …) in one run so machine
 * noise hits both paths alike; medians. Not part of `npm test`: run `npm run bench -- hub-overhead`.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { startLlamaServer } from '../src/main/core/llama/index.js';
import { ensureFixture, type FixtureName } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { sseData } from './sse.js';
import { reportRatio, reportTarget } from './targets.js';
import { cpuMs } from './proc.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
/** llama.cpp threads per run: 1 leaves the hub a core of its own; 2 has every core generating. */
const THREAD_COUNTS = (process.env.BENCH_THREADS ?? '1,2').split(',');
const CTX = 1024;
const BARE_ROUNDS = 6;
/** Requests of one token each, for the relay's CPU per request (its request path, which the first token waits for). */
const SHORT_REQUESTS = Number(process.env.BENCH_SHORT_REQUESTS ?? 100);
const WARM_REQUESTS = Number(process.env.BENCH_WARM_REQUESTS ?? 40);

interface Sample {
  ttftMs: number;
  tokPerS: number;
  tokens: number;
}

/** One streaming completion; TTFT = request start → first content chunk; tok/s over the rest of the stream. */
async function sample(url: string, model: string, prompt: string, maxTokens = MAX_TOKENS): Promise<Sample> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature: 0, top_k: 1, seed: 1, stream: true }),
  });
  if (!res.ok || !res.body) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let first = 0;
  let last = 0;
  let tokens = 0;
  for await (const ev of sseData(res)) {
    if ((ev as { choices?: { text?: string }[] }).choices?.[0]?.text) {
      const now = performance.now();
      if (tokens === 0) first = now;
      last = now;
      tokens++;
    }
  }
  return { ttftMs: first - t0, tokPerS: tokens > 1 ? (tokens - 1) / ((last - first) / 1000) : 0, tokens };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/**
 * The least any Node.js HTTP relay pays: a child process that forwards each request to llama-server and writes
 * the response's chunks back as they come (no auth, no routing, no failover). Its CPU per token beside the
 * hub's says how much of the hub's cost is relay's own code and how much Node's HTTP machinery.
 */
const BARE_RELAY = `const http = require('node:http');
const up = Number(process.argv[1]);
const s = http.createServer((req, res) => {
  const body = []; req.on('data', (c) => body.push(c)); req.on('end', () => {
    const u = http.request({ host: '127.0.0.1', port: up, agent: false, method: req.method, path: req.url, headers: { 'content-type': 'application/json' } }, (ur) => {
      res.writeHead(ur.statusCode, { 'content-type': ur.headers['content-type'] });
      ur.on('data', (c) => res.write(c)); ur.on('end', () => res.end());
    });
    u.end(Buffer.concat(body));
  });
}).listen(0, '127.0.0.1', () => process.stdout.write(String(s.address().port) + '\\n'));`;

async function bareRelay(upstreamPort: number): Promise<{ url: string; pid: number; stop: () => void }> {
  const child = spawn(process.execPath, ['-e', BARE_RELAY, String(upstreamPort)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = (await once(createInterface({ input: child.stdout }), 'line')) as [string];
  return { url: `http://127.0.0.1:${line.trim()}`, pid: child.pid!, stop: () => child.kill() };
}

async function benchModel(name: FixtureName, THREADS: string): Promise<string[]> {
  const path = ensureFixture(name, { vocabDir: llama().vocabDir });
  const env = { RELAY_CONTEXT_SIZE: String(CTX), RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: THREADS, RELAY_LOG_LEVEL: 'warn' };
  const hub = await startHub({ env, args: ['--cpu-budget-mb', '4000'] });
  const direct = await startLlamaServer(llama(), { model: path, ctx: CTX, slots: 1, cacheType: 'f16', threads: Number(THREADS), metrics: true });
  try {
    await addModel(hub, { path, name });
    const prompts = ['Once upon a time', 'The history of the bicycle', 'In the beginning', 'A recipe for bread'];
    // Warm both (the hub's first request also loads its replica), then WARM_REQUESTS short ones each: a hub that has
    // served a few dozen requests runs its request path compiled (V8's JIT), as a household's hub does after minutes.
    await sample(hub.url, name, 'warm up');
    await sample(direct.baseUrl, name, 'warm up');
    for (let i = 0; i < WARM_REQUESTS; i++) {
      await sample(hub.url, name, 'warm up', 4);
      await sample(direct.baseUrl, name, 'warm up', 4);
    }
    const d: Sample[] = [];
    const h: Sample[] = [];
    let hubCpuMs = 0;
    for (let r = 0; r < ROUNDS; r++) {
      const p = prompts[r % prompts.length]!;
      const order = r % 2 === 0 ? (['d', 'h'] as const) : (['h', 'd'] as const);
      for (const which of order) {
        if (which === 'd') d.push(await sample(direct.baseUrl, name, p));
        else {
          const c0 = cpuMs(hub.proc.pid!);
          h.push(await sample(hub.url, name, p));
          hubCpuMs += cpuMs(hub.proc.pid!) - c0;
        }
      }
    }
    // The bare relay: a few requests, for its CPU per token only.
    // CPU per request: what the relay spends on a request whose answer is one token (its /proc clock ticks at
    // 10 ms, hence many requests). Less at the mercy of this VM's scheduling than the time to first token.
    const cpuPerRequest = async (url: string, pid: number): Promise<number> => {
      const c0 = cpuMs(pid);
      for (let i = 0; i < SHORT_REQUESTS; i++) await sample(url, name, prompts[i % prompts.length]!, 1);
      return (cpuMs(pid) - c0) / SHORT_REQUESTS;
    };
    const hubPerRequest = await cpuPerRequest(hub.url, hub.proc.pid!);
    const bare = await bareRelay(direct.port);
    let barePerRequest = 0;
    let bareCpuMs = 0;
    let bareTokens = 0;
    const bareTtft: number[] = [];
    try {
      await sample(bare.url, name, 'warm up');
      for (let i = 0; i < WARM_REQUESTS; i++) await sample(bare.url, name, 'warm up', 4);
      barePerRequest = await cpuPerRequest(bare.url, bare.pid);
      for (let r = 0; r < BARE_ROUNDS; r++) {
        const c0 = cpuMs(bare.pid);
        const b = await sample(bare.url, name, prompts[r % prompts.length]!);
        bareTokens += b.tokens;
        bareTtft.push(b.ttftMs);
        bareCpuMs += cpuMs(bare.pid) - c0;
      }
    } finally {
      bare.stop();
    }
    const dTok = median(d.map((s) => s.tokPerS));
    const hTok = median(h.map((s) => s.tokPerS));
    const dTtft = median(d.map((s) => s.ttftMs));
    const hTtft = median(h.map((s) => s.ttftMs));
    // Each round ran one direct and one hub request back to back: the median of their differences is the
    // hub's added TTFT with the machine's slow drifts paired out.
    const added = median(h.map((s, i) => s.ttftMs - d[i]!.ttftMs));
    const sign = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(2)}`;
    // The issue's targets: tok/s on the fast fixture (dense), added TTFT on each.
    if (name === 'dense') reportRatio(`hub ÷ direct generation tok/s, ${name}, ${THREADS} llama.cpp thread(s)`, hTok / dTok, THREADS === '1' ? 0.98 : 0.95);
    reportTarget(`added TTFT p50 (paired), ${name}, ${THREADS} thread(s)`, `${sign(added)} ms`, '≤ +0.5 ms', added <= 0.5);
    return [
      `| ${name} | ${THREADS} | generation tok/s (median) | ${dTok.toFixed(1)} | ${hTok.toFixed(1)} | ${(hTok / dTok).toFixed(3)} |`,
      `| ${name} | ${THREADS} | TTFT p50 ms | ${dTtft.toFixed(2)} | ${hTtft.toFixed(2)} | ${sign(added)} ms (paired) |`,
      `| ${name} | ${THREADS} | TTFT p50 ms through a bare Node.js HTTP relay (${BARE_ROUNDS} requests) | | ${median(bareTtft).toFixed(2)} | ${sign(median(bareTtft) - dTtft)} ms vs direct's median |`,
      `| ${name} | ${THREADS} | relay process CPU per token: the hub / a bare Node.js HTTP relay | | ${((hubCpuMs * 1000) / h.reduce((a, x) => a + x.tokens, 0)).toFixed(0)} µs / ${((bareCpuMs * 1000) / bareTokens).toFixed(0)} µs | |`,
      `| ${name} | ${THREADS} | relay process CPU per request (${SHORT_REQUESTS} one-token answers): the hub / a bare Node.js HTTP relay | | ${barePerRequest > 0 ? `${hubPerRequest.toFixed(2)} ms / ${barePerRequest.toFixed(2)} ms` : '-'} | ${barePerRequest > 0 ? (hubPerRequest / barePerRequest).toFixed(2) : '-'} |`,
      `| ${name} | ${THREADS} | TTFT p90 ms | ${pct(
        d.map((s) => s.ttftMs),
        90,
      ).toFixed(2)} | ${pct(
        h.map((s) => s.ttftMs),
        90,
      ).toFixed(2)} | |`,
    ];
  } finally {
    await direct.child.terminate(5000);
    await hub.stop();
  }
}

const rows: string[] = [];
for (const t of THREAD_COUNTS) {
  for (const m of (process.env.BENCH_MODELS ?? 'dense,large').split(',') as FixtureName[]) rows.push(...(await benchModel(m, t)));
}
console.log(`\nhub overhead: ${ROUNDS} interleaved rounds, ${MAX_TOKENS} tokens each, ctx ${CTX}, streaming /v1/completions\n`);
console.log('| model | llama.cpp threads | metric | direct llama-server | through hub | hub ÷ direct |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(r);
