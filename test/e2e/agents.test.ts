import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { AGENTS, runAgent, type AgentRun } from '../helpers/agents.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { signalIfRunning, until } from '../helpers/proc.js';
import { startRecorder, type Exchange, type Recorder } from '../helpers/recorder.js';

/**
 * The coding agents a household runs (Claude Code, Codex, Qwen Code, opencode, pi, Continue: test/agents, pinned),
 * each given one prompt non-interactively, through a real hub and against a bare llama-server started with the very
 * arguments the hub gave its replica. A recording proxy in front of each: every request the agent sends gets the
 * same status, error code and stream form from both, and the agent finishes the turn the same way on both — exit 0,
 * its final message being the model's answer. The model is the `agent` fixture: the tools template, 32k of training
 * context (an agent's first prompt is ~12k tokens), whole words only, answers that end by themselves.
 */
const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
const MODEL = 'agent';
const CTX = 32768;
const PROMPT = 'Say hello in three words.';

const argvOf = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** What must match between the two servers, order aside (an agent sends some requests side by side). */
const signature = (xs: readonly Exchange[]) => xs.map((x) => `${x.method} ${x.path} → ${x.status} ${x.form}${x.error ? ` (${x.error})` : ''}`).sort();

/** A finished turn: exit 0 and the final message is one of the model's answers, as the recorder saw it. */
function assertTurn(agent: string, where: string, r: AgentRun, rec: Recorder): void {
  const why = `${agent} ${where}: exit ${r.code}\nstdout: ${r.stdout.slice(-2000)}\nstderr: ${r.stderr.slice(-2000)}\n${signature(rec.exchanges).join('\n')}`;
  assert.equal(r.code, 0, why);
  const answers = rec.exchanges.map((x) => x.text.trim()).filter((t) => t.length > 0);
  assert.ok(answers.length > 0, `no answer carried text: ${why}`);
  assert.ok(
    answers.some((a) => r.final.includes(a)),
    `the final message is none of the answers: ${JSON.stringify(r.final)} vs ${JSON.stringify(answers)}\n${why}`,
  );
}

describe('coding agents through the hub, beside a bare llama-server', { timeout: 1_200_000 }, () => {
  let hub: HubProcess;
  let bare: ChildProcess;
  let bareOrigin = '';

  before(async () => {
    hub = await startHub({ env: { RELAY_THREADS: '2' }, args: ['--cpu-budget-mb', '2000'] });
    await run(process.execPath, [relay, 'models', 'add', fixture('agent'), '--name', MODEL, '--ctx', String(CTX), '--slots', '1', '--hub', hub.url]);
    const warm = await fetch(`${hub.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(warm.status, 200, await warm.text());
    const replica = (await hub.status()).replicas.find((r) => r.model === MODEL && r.state === 'ready');
    assert.ok(replica?.pid, 'the hub runs a replica of the agent model');
    // The bare server: the hub's replica's own argv, on another port, its slot files in a folder of its own.
    const argv = argvOf(replica.pid);
    const port = await freePort();
    const args = argv.slice(1).map((a, i, all) => (all[i - 1] === '--port' ? String(port) : all[i - 1] === '--slot-save-path' ? mkdtempSync(join(tmpdir(), 'bare-slots-')) : a));
    bare = spawn(argv[0]!, args, { stdio: 'ignore' });
    bareOrigin = `http://127.0.0.1:${port}`;
    await until(
      () =>
        fetch(`${bareOrigin}/health`).then(
          (r) => r.status,
          () => 0,
        ),
      (s) => s === 200,
      60_000,
    );
  });

  after(async () => {
    if (bare) signalIfRunning(bare, 'SIGKILL');
    await hub?.stop();
  });

  for (const agent of AGENTS) {
    it(`${agent}: every request answered as bare llama-server answers it, and the turn ends the same`, async (t) => {
      const [direct, relayed] = [await startRecorder(bareOrigin), await startRecorder(hub.url)];
      try {
        const target = { model: MODEL, ctx: CTX, maxTokens: 512 };
        const onBare = await runAgent(agent, { ...target, origin: direct.origin }, PROMPT);
        const onHub = await runAgent(agent, { ...target, origin: relayed.origin }, PROMPT);
        assertTurn(agent, 'against bare llama-server', onBare, direct);
        assertTurn(agent, 'through the hub', onHub, relayed);
        assert.deepEqual(signature(relayed.exchanges), signature(direct.exchanges), `${agent}: the hub's answers differ in form from bare llama-server's`);
        t.diagnostic(`${agent} → ${signature(relayed.exchanges).join('; ')}; final ${JSON.stringify(onHub.final.slice(0, 80))}`);
      } finally {
        await Promise.all([direct.close(), relayed.close()]);
      }
    });
  }
});
