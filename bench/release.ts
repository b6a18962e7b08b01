/**
 * `npm run bench -- release`: what a household downloads and how soon it answers. The release `npm run release`
 * builds (the same cached build the tests use), then rounds of: unpack the Linux archive into an empty folder, and in
 * the minimal Debian root (no Node.js, no compiler; a fresh HOME) start `relay hub`, register a model with the
 * release's own `relay models add`, and time the first answer on /v1. The direct path in the same rounds: a
 * checkout's `node bin/relay.js hub` (llama.cpp already built) doing the same.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { freePort } from '../src/main/core/llama/index.js';
import { fixture } from '../test/helpers/llama.js';
import { chat } from '../test/helpers/openai.js';
import { lines, minimalRoot, releaseBuild, runInRoot, spawnInRoot, unpack } from '../test/helpers/release.js';
import { median } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const repo = new URL('../../', import.meta.url).pathname;

interface Times {
  serving: number;
  registered: number;
  answered: number;
}

/** From the spawn of `hub` to its banner, the model registered (`register`), and the first answer. */
async function firstAnswer(hub: ChildProcess, register: (url: string) => Promise<void>): Promise<Times> {
  const t0 = performance.now();
  const l = lines(hub);
  const url = (await l.waitFor(/^\s+\/v1\s+http/)).trim().split(/\s+/)[1]!.replace(/\/v1$/, '');
  const serving = performance.now() - t0;
  await register(url);
  const registered = performance.now() - t0;
  await chat(url, 'Hello', 8, 'dense');
  return { serving, registered, answered: performance.now() - t0 };
}

const build = await releaseBuild();
const root = await minimalRoot();
const rows: { release: Times; checkout: Times; unpackMs: number }[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const work = mkdtempSync(join(tmpdir(), 'relay-bench-release-'));
  const running: ChildProcess[] = [];
  try {
    mkdirSync(join(work, 'models'));
    copyFileSync(fixture('dense'), join(work, 'models', 'dense.gguf'));
    const u0 = performance.now();
    const dir = unpack(build.linux, join(work, 'copy'));
    const unpackMs = performance.now() - u0;
    const exe = `/work/${dir.slice(work.length + 1)}/relay`;
    const hub = spawnInRoot(root, work, [exe, 'hub', '--port', String(await freePort()), '--cpu-budget-mb', '1000'], { HOME: '/work/home', ...ENV });
    running.push(hub);
    const release = await firstAnswer(hub, async (url) => {
      const r = await runInRoot(root, work, [exe, 'models', 'add', '/work/models/dense.gguf', '--name', 'dense', '--hub', url], { HOME: '/work/home' });
      if (r.code !== 0) throw new Error(r.stderr);
    });
    const home = join(work, 'checkout-home');
    const direct = spawn(process.execPath, [join(repo, 'bin', 'relay.js'), 'hub', '--port', '0', '--home', home, '--cpu-budget-mb', '1000'], {
      env: { ...process.env, ...ENV },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    running.push(direct);
    const checkout = await firstAnswer(direct, async (url) => {
      const add = spawn(process.execPath, [join(repo, 'bin', 'relay.js'), 'models', 'add', join(work, 'models', 'dense.gguf'), '--name', 'dense', '--hub', url], { stdio: 'ignore' });
      const code = await new Promise((r) => add.once('exit', r));
      if (code !== 0) throw new Error(`models add exited ${String(code)}`);
    });
    rows.push({ release, checkout, unpackMs });
  } finally {
    for (const p of running) p.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  }
}

const s = (ms: number): string => (ms / 1000).toFixed(2);
const med = (f: (r: (typeof rows)[number]) => number): number => median(rows.map(f));
console.log(`\n${ROUNDS} rounds, medians; the release in a minimal Debian root, the checkout on this machine (llama.cpp already built)\n`);
console.log('| archive | size | unpack | to serving | to registered | to first answer | checkout: to first answer | release ÷ checkout |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
console.log(
  `| relay-${build.version}-linux-x64.tar.gz | ${(statSync(build.linux).size / 1e6).toFixed(1)} MB | ${s(med((r) => r.unpackMs))} s | ${s(med((r) => r.release.serving))} s | ${s(med((r) => r.release.registered))} s | ${s(med((r) => r.release.answered))} s | ${s(med((r) => r.checkout.answered))} s | ${(med((r) => r.release.answered) / med((r) => r.checkout.answered)).toFixed(2)} |`,
);
console.log(`| relay-${build.version}-win-x64.zip | ${(statSync(build.windows).size / 1e6).toFixed(1)} MB | | | | | | |`);
for (const [n, f] of Object.entries(build.npm)) console.log(`| npm: ${f.split('/').pop()} (${n}) | ${(statSync(f).size / 1e6).toFixed(1)} MB | | | | | | |`);
