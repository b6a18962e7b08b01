import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, startLlamaServer } from '../../src/main/core/llama/index.js';
import { fixture, llama } from '../helpers/llama.js';
import { chat } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { BUILD_OR_FETCH, lines, minimalRoot, releaseBuild, runInRoot, spawnInRoot, unpack } from '../helpers/release.js';

/**
 * The Linux release on a clean machine: the archive `npm run release` makes, unpacked into empty folders and run
 * inside a minimal Debian root made from Debian's packages (debootstrap minbase: no Node.js, npm, compiler, git
 * or Python, no checkout, a fresh HOME), in a mount and pid namespace of its own. The hub runs from one copy, the
 * node from a second one with the command the dashboard's "Add a node…" shows; both answer what a bare
 * llama-server answers at temperature 0, and neither builds or fetches anything.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'info', RELAY_HEARTBEAT_MS: '500' };
const PROMPT = 'Tell me about the sea.';

describe('the Linux release on a clean machine', { timeout: 2_400_000 }, () => {
  let root: string;
  let work: string;
  let hubRelease: string;
  let nodeRelease: string;
  let hubUrl: string;
  const running: ChildProcess[] = [];
  let hubLines: ReturnType<typeof lines>;
  let want: string;

  const inRoot = (p: string): string => `/work/${p.slice(work.length + 1)}`;

  before(async () => {
    const build = await releaseBuild();
    root = await minimalRoot();
    work = mkdtempSync(join(tmpdir(), 'relay-release-'));
    hubRelease = unpack(build.linux, join(work, 'hub-copy'));
    nodeRelease = unpack(build.linux, join(work, 'node-copy'));
    mkdirSync(join(work, 'models'));
    copyFileSync(fixture('dense'), join(work, 'models', 'dense.gguf'));
    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      want = (await chat(direct.baseUrl, PROMPT)).text;
    } finally {
      await direct.child.terminate(5000);
    }
  }, { timeout: 1_800_000 }); // a fresh machine cross-builds llama.cpp for Windows and builds the release first
  after(() => {
    // SIGKILL of unshare ends its pid namespace: every process inside (relay, llama-server) with it.
    for (const p of running) p.kill('SIGKILL');
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('the root has no Node.js, npm, compiler, git or Python, and the release folder is the whole program', async () => {
    const r = await runInRoot(root, work, ['sh', '-c', 'for c in node nodejs npm npx cmake gcc g++ cc make git python3; do command -v $c; done; echo done']);
    assert.equal(r.stdout.trim(), 'done', `found in the root: ${r.stdout}`);
    assert.deepEqual(readdirSync(hubRelease).sort(), ['LICENSE', 'README.txt', 'app', 'llama', 'node_modules', 'relay']);
    assert.match(basename(hubRelease), /^relay-\d+\.\d+\.\d+-linux-x64$/);
  });

  it('relay hub serves a registered model on /v1 with the llama.cpp it ships; nothing is built or fetched', async () => {
    const port = await freePort();
    const hub = spawnInRoot(root, work, [inRoot(join(hubRelease, 'relay')), 'hub', '--port', String(port), '--home', '/work/hub-home', '--cpu-budget-mb', '1000'], { HOME: '/work/home-hub', ...ENV });
    running.push(hub);
    hubLines = lines(hub);
    hubUrl = (await hubLines.waitFor(/^\s+\/v1\s+http/)).trim().split(/\s+/)[1]!.replace(/\/v1$/, '');
    // The release's own CLI registers the model (hashing and reading the header in its worker thread).
    const add = await runInRoot(root, work, [inRoot(join(hubRelease, 'relay')), 'models', 'add', '/work/models/dense.gguf', '--name', 'dense', '--hub', hubUrl], { HOME: '/work/home-hub' });
    assert.equal(add.code, 0, add.stderr);
    assert.match(add.stdout, /added: dense/);
    assert.equal((await chat(`${hubUrl}`, PROMPT, 24, 'dense')).text, want);
    const page = await fetch(`${hubUrl}/`);
    assert.match(await page.text(), /<title>relay — pool<\/title>/, 'the dashboard is served from app/');

    assert.ok(hubLines.all.some((l) => l.includes('llama.cpp shipped with relay') && l.includes(`"llama":"${inRoot(join(hubRelease, 'llama'))}"`)));
    assert.ok(!hubLines.all.some((l) => BUILD_OR_FETCH.test(l)), 'no build step, no download');
    assert.ok(!existsSync(join(work, 'home-hub', '.cache', 'relay', 'llama.cpp')), 'no llama.cpp cache was made');
  });

  it('relay up from a second copy, run as "Add a node…" shows it, joins and serves a replica with the same text', async () => {
    const made = (await (await fetch(`${hubUrl}/api/nodes/token`, { method: 'POST' })).json()) as { commands: { os: string; command: string }[] };
    const linux = made.commands.find((c) => c.os === 'linux')!.command;
    assert.match(linux, /^\.\/relay up --token rly1\./);
    const node = spawnInRoot(root, work, ['sh', '-c', `cd ${inRoot(nodeRelease)} && exec ${linux} --name attic --cpu-budget-mb 1000`], { HOME: '/work/home-node', ...ENV });
    running.push(node);
    const nodeLines = lines(node);
    await nodeLines.waitFor(/relay node attic connected to/);
    // The hub's own devices paused: the request goes to the node (the hub pushes the GGUF into its cache first).
    const paused = await fetch(`${hubUrl}/api/hub/availability`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
    assert.equal(paused.status, 200);
    await until(
      async () => ((await (await fetch(`${hubUrl}/status`)).json()) as { replicas: { node: string | null }[] }).replicas.filter((r) => r.node === null).length,
      (n) => n === 0,
    );
    assert.equal((await chat(hubUrl, PROMPT, 24, 'dense')).text, want);
    const status = (await (await fetch(`${hubUrl}/status`)).json()) as { replicas: { node: string | null; state: string }[] };
    assert.deepEqual(
      status.replicas.map((r) => [r.node, r.state]),
      [['attic', 'ready']],
    );
    assert.ok(nodeLines.all.some((l) => l.includes('llama.cpp shipped with relay')));
    assert.ok(!nodeLines.all.some((l) => BUILD_OR_FETCH.test(l)), 'no build step, no download');
    assert.ok(!existsSync(join(work, 'home-node', '.cache', 'relay', 'llama.cpp')), 'no llama.cpp cache was made');
  });
});
