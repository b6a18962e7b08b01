import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { AGENTS, runAgent, type Agent, type AgentRun } from '../helpers/agents.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { argvOf, signalIfRunning, until } from '../helpers/proc.js';
import { freePort } from '../../src/main/core/llama/ports.js';
import { startRecorder, type Exchange } from '../helpers/recorder.js';

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
/** The same fixture with less context than any agent's first prompt (their system prompts are 3k–14k tokens). */
const SMALL = 'agent-small';
const SMALL_CTX = 1024;

/**
 * What must match between the two servers, order aside (an agent sends some requests side by side): status, form,
 * and an error's message — llama-server's own words, numbers aside (a prompt's token count moves with the temp
 * folder's name an agent puts in it). The error's code is checked apart: relay answers a refusal in the dialect's
 * error shape with a stable code (`refusalCodes`), where llama-server answers every dialect in its own shape.
 */
const signature = (xs: readonly Exchange[]) => xs.map((x) => `${x.method} ${x.path} → ${x.status} ${x.form}${x.message ? ` "${x.message.replace(/\d+/g, '#')}"` : ''}`).sort();

/** A context overflow: llama-server's type, and what relay answers in each dialect (OpenAI's own code for it). */
function refusalCodes(xs: readonly Exchange[], relayed: boolean): string[] {
  return xs.filter((x) => x.status >= 400).map((x) => (relayed && x.path !== '/v1/messages' ? `code ${x.error}` : `type ${x.errorType}`));
}

/** A finished turn: exit 0 and the final message is one of the model's answers, as the recorder saw it. */
function assertTurn(agent: string, where: string, r: AgentRun, seen: readonly Exchange[]): void {
  const why = `${agent} ${where}: exit ${r.code}\nstdout: ${r.stdout.slice(-2000)}\nstderr: ${r.stderr.slice(-2000)}\n${signature(seen).join('\n')}`;
  assert.equal(r.code, 0, why);
  const answers = seen.map((x) => x.text.trim()).filter((t) => t.length > 0);
  assert.ok(answers.length > 0, `no answer carried text: ${why}`);
  assert.ok(
    answers.some((a) => r.final.includes(a)),
    `the final message is none of the answers: ${JSON.stringify(r.final)} vs ${JSON.stringify(answers)}\n${why}`,
  );
}

describe('coding agents through the hub, beside a bare llama-server', { timeout: 1_200_000 }, () => {
  let hub: HubProcess;
  const bares: ChildProcess[] = [];
  const bareOf = new Map<string, string>();

  /** Registers the agent fixture as `name` with `ctx`, runs it once on the hub, and a bare llama-server with its argv. */
  async function serve(name: string, ctx: number): Promise<void> {
    await run(process.execPath, [relay, 'models', 'add', fixture('agent'), '--name', name, '--ctx', String(ctx), '--slots', '1', '--hub', hub.url]);
    const warm = await fetch(`${hub.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: name, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(warm.status, 200, await warm.text());
    const replica = (await hub.status()).replicas.find((r) => r.model === name && r.state === 'ready');
    assert.ok(replica?.pid, `the hub runs a replica of ${name}`);
    // The bare server: the hub's replica's own argv, on another port, its slot files in a folder of its own.
    const argv = argvOf(replica.pid);
    const port = await freePort();
    const args = argv.slice(1).map((a, i, all) => (all[i - 1] === '--port' ? String(port) : all[i - 1] === '--slot-save-path' ? mkdtempSync(join(tmpdir(), 'bare-slots-')) : a));
    bares.push(spawn(argv[0]!, args, { stdio: 'ignore' }));
    const origin = `http://127.0.0.1:${port}`;
    await until(
      () =>
        fetch(`${origin}/health`).then(
          (r) => r.status,
          () => 0,
        ),
      (s) => s === 200,
      60_000,
    );
    bareOf.set(name, origin);
  }

  /** One prompt through the hub and against the bare server, each behind a recorder. */
  async function both(agent: Agent, model: string, ctx: number, timeoutMs?: number) {
    const [direct, relayed] = [await startRecorder(bareOf.get(model)!), await startRecorder(hub.url)];
    try {
      const target = { model, ctx, maxTokens: 512 };
      const onBare = await runAgent(agent, { ...target, origin: direct.origin }, PROMPT, timeoutMs);
      const onHub = await runAgent(agent, { ...target, origin: relayed.origin }, PROMPT, timeoutMs);
      return { onBare, onHub, direct: direct.exchanges, relayed: relayed.exchanges };
    } finally {
      await Promise.all([direct.close(), relayed.close()]);
    }
  }

  before(async () => {
    hub = await startHub({ env: { RELAY_THREADS: '2' }, args: ['--cpu-budget-mb', '2000'] });
    await serve(MODEL, CTX);
    await serve(SMALL, SMALL_CTX);
  });

  after(async () => {
    for (const b of bares) signalIfRunning(b, 'SIGKILL');
    await hub?.stop();
  });

  for (const agent of AGENTS) {
    it(`${agent}: every request answered as bare llama-server answers it, and the turn ends the same`, async (t) => {
      const r = await both(agent, MODEL, CTX);
      assertTurn(agent, 'against bare llama-server', r.onBare, r.direct);
      assertTurn(agent, 'through the hub', r.onHub, r.relayed);
      assert.deepEqual(signature(r.relayed), signature(r.direct), `${agent}: the hub's answers differ in form from bare llama-server's`);
      t.diagnostic(`${agent} → ${signature(r.relayed).join('; ')}; final ${JSON.stringify(r.onHub.final.slice(0, 80))}`);
    });
  }

  // The same agents where they cannot finish: a model given less context than their first prompt. llama-server
  // refuses it; through the hub they meet the very same refusal (not one of relay's own) and fail alike. Qwen Code
  // and Continue count the prompt themselves and send nothing; opencode compacts and asks again, forever, on both
  // (it is stopped after 15 s): the forms seen are compared, not how many.
  for (const agent of AGENTS) {
    it(`${agent}: a prompt past the model's context fails through the hub as it fails on bare llama-server`, async (t) => {
      const looping = agent === 'opencode';
      const r = await both(agent, SMALL, SMALL_CTX, looping ? 15_000 : undefined);
      const forms = (xs: readonly Exchange[]) => [...new Set(signature(xs))];
      assert.deepEqual(forms(r.relayed), forms(r.direct), `${agent}: the hub's answers differ in form from bare llama-server's`);
      const refused = r.direct.filter((x) => x.status >= 400);
      assert.equal(refused.length === 0, agent === 'qwen' || agent === 'cn', `${agent} sent ${r.direct.length} requests`);
      assert.ok(
        refused.every((x) => x.status === 400 && x.errorType === 'exceed_context_size_error'),
        signature(r.direct).join('\n'),
      );
      const stable = agent === 'claude' ? 'type invalid_request_error' : 'code context_length_exceeded';
      assert.ok(
        refusalCodes(r.relayed, true).every((c) => c === stable),
        refusalCodes(r.relayed, true).join(', '),
      );
      // Not a finished turn on either: the same exit, nothing printed as an answer (opencode, killed, prints its
      // compaction notes and the sampled summaries between them).
      assert.equal(r.onHub.code, r.onBare.code, `${agent}: exit ${r.onHub.code} vs ${r.onBare.code}`);
      if (!looping) assert.deepEqual([r.onHub.final, r.onBare.final], ['', '']);
      assert.equal(r.onBare.code, looping ? null : 1);
      t.diagnostic(`${agent} → ${forms(r.relayed).join('; ')}; exit ${r.onHub.code} (bare: ${r.onBare.code})`);
    });
  }
});
