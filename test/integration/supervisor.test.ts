import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { freePort, spawnChild } from '../../src/main/core/llama/index.js';
import { ownChildPids } from '../../src/main/core/llama/supervisor.js';
import { alive, waitGone } from '../helpers/proc.js';

const node = process.execPath;
const js = (code: string) => ({ command: node, args: ['-e', code] });

describe('supervisor', () => {
  it('is ready when the listening line appears', async () => {
    const c = spawnChild({ name: 'liner', ...js('setTimeout(() => console.log("server is listening on x"), 100); setInterval(() => {}, 1000)'), readiness: { kind: 'line', pattern: /listening/ } });
    await c.ready;
    assert.equal(c.running, true);
    await c.terminate(1000);
    assert.equal(c.running, false);
  });

  it('is ready only when the health endpoint answers 200, not 503', async () => {
    const port = await freePort();
    const code = `let n = 0; require('http').createServer((q, s) => { n++; s.statusCode = n < 4 ? 503 : 200; s.end(String(n)); }).listen(${port}, '127.0.0.1')`;
    const c = spawnChild({ name: 'health', ...js(code), readiness: { kind: 'http', url: `http://127.0.0.1:${port}/health`, intervalMs: 20 } });
    await c.ready;
    const res = await fetch(`http://127.0.0.1:${port}/health`);
    assert.equal(Number(await res.text()), 5); // three 503s, the 200 that made it ready, then ours
    await c.terminate();
  });

  it("a child is relay's own from its spawn (still loading) until it exits: auto-pause never counts it", async () => {
    const c = spawnChild({ name: 'loading', ...js('setInterval(() => {}, 1000)'), readiness: { kind: 'line', pattern: /never/ } });
    assert.ok(c.pid !== undefined && ownChildPids().has(c.pid), 'listed before it is ready');
    await c.terminate(1000);
    assert.equal(ownChildPids().has(c.pid), false, 'gone once it exited');
  });

  it('a stopped child (SIGSTOP) still stops gracefully on terminate: SIGTERM, then SIGCONT so it can handle it', async () => {
    const c = spawnChild({
      name: 'stopped',
      ...js('process.on("SIGTERM", () => { console.log("bye"); process.exit(0); }); console.log("up"); setInterval(() => {}, 1000)'),
      readiness: { kind: 'line', pattern: /up/ },
    });
    await c.ready;
    process.kill(c.pid!, 'SIGSTOP');
    assert.deepEqual(await c.terminate(60_000), { code: 0, signal: null }, 'it handled SIGTERM itself, long before the SIGKILL');
    assert.ok(c.output().includes('bye'));
  });

  it('a child stopped (SIGSTOP) while it loads fails its start with CHILD_STOPPED instead of waiting out its deadline', async () => {
    const c = spawnChild({ name: 'frozen', ...js('setInterval(() => {}, 1000)'), readiness: { kind: 'line', pattern: /never/ }, readyTimeoutMs: 600_000 });
    process.kill(c.pid!, 'SIGSTOP');
    await assert.rejects(c.ready, (e: unknown) => isRelayError(e, 'CHILD_STOPPED') && /stopped \(SIGSTOP\?\) while it loaded/.test(e.message));
    await c.terminate(5000); // SIGTERM, then SIGCONT: it goes
    assert.equal(c.running, false);
  });

  it('rejects readiness with CHILD_EXITED_EARLY and the stderr tail when the child dies first', async () => {
    const c = spawnChild({ name: 'dies', ...js('console.error("error: model file is corrupt"); process.exit(3)'), readiness: { kind: 'line', pattern: /never/ } });
    await assert.rejects(c.ready, (e: unknown) => isRelayError(e, 'CHILD_EXITED_EARLY') && /exit code 3/.test(e.message) && /model file is corrupt/.test(e.message));
    assert.deepEqual(await c.exited, { code: 3, signal: null });
  });

  it('rejects with CHILD_READY_TIMEOUT and stops the child', async () => {
    const c = spawnChild({ name: 'slow', ...js('console.log("loading"); setInterval(() => {}, 1000)'), readiness: { kind: 'line', pattern: /never/ }, readyTimeoutMs: 300 });
    await assert.rejects(c.ready, (e: unknown) => isRelayError(e, 'CHILD_READY_TIMEOUT') && /loading/.test(e.message));
    await c.exited;
    assert.equal(c.running, false);
  });

  it('terminate sends SIGTERM, then SIGKILL to a child that ignores it; idempotent', async () => {
    const c = spawnChild({
      name: 'stubborn',
      ...js('process.on("SIGTERM", () => console.log("ignored")); console.log("up"); setInterval(() => {}, 1000)'),
      readiness: { kind: 'line', pattern: /up/ },
    });
    await c.ready;
    const [a, b] = await Promise.all([c.terminate(300), c.terminate(300)]);
    assert.equal(a.signal, 'SIGKILL');
    assert.deepEqual(a, b);
    assert.ok(c.output().includes('ignored'), 'SIGTERM was delivered first');
  });

  it('a child that honours SIGTERM exits without SIGKILL', async () => {
    const c = spawnChild({ name: 'polite', ...js('process.on("SIGTERM", () => process.exit(0)); console.log("up"); setInterval(() => {}, 1000)'), readiness: { kind: 'line', pattern: /up/ } });
    await c.ready;
    assert.deepEqual(await c.terminate(10_000), { code: 0, signal: null });
  });

  it('a missing binary is CHILD_SPAWN_FAILED', () => {
    assert.throws(
      () => spawnChild({ name: 'ghost', command: '/nonexistent/llama-server', args: [], readiness: { kind: 'none' } }),
      (e: unknown) => isRelayError(e, 'CHILD_SPAWN_FAILED'),
    );
  });
});

describe('no orphans', () => {
  const parent = new URL('../helpers/orphan-parent.js', import.meta.url).pathname;

  async function startParent(mode: 'wait' | 'exit') {
    const p = spawn(node, [parent, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: p.stdout }).once('line', resolve);
      p.once('exit', (code) => reject(new Error(`parent exited early with ${code}`)));
    });
    const exited = new Promise<void>((r) => (p.exitCode !== null ? r() : p.once('exit', () => r())));
    return { p, child: JSON.parse(line) as { pid: number }, exited };
  }

  it('a real ggml-rpc-server dies when its parent is SIGKILLed (no chance to clean up)', async () => {
    const { p, child, exited } = await startParent('wait');
    assert.ok(alive(child.pid));
    p.kill('SIGKILL');
    await exited;
    assert.ok(await waitGone(child.pid, 10_000), `ggml-rpc-server ${child.pid} outlived its parent`);
  });

  it('a real ggml-rpc-server dies when its parent exits normally', async () => {
    const { child, exited } = await startParent('exit');
    await exited;
    assert.ok(await waitGone(child.pid, 10_000), `ggml-rpc-server ${child.pid} outlived its parent`);
  });
});
