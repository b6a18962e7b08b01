import { healthStatus } from './health.js';
import { processState, type ManagedChild } from './supervisor.js';

/**
 * Whether a child that a stalled request depends on can still answer: asked only when a request through it has
 * heard nothing for a while (a long prompt is silent too, so the question must be cheap and definite).
 *  - `stopped`: the kernel says the process is stopped (SIGSTOP, a debugger) — it will not answer until continued;
 *  - `unresponsive`: llama-server's /health did not answer within the limit — its HTTP threads, which do not
 *    wait on the model, are frozen (swapped out, stopped, dying);
 *  - `gone`: it exited; `ok` otherwise (it may simply be computing: a slow answer is not a dead one).
 * An rpc-server has no second port to ask (it serves one connection at a time): only its process state is read.
 */
export type Liveness = 'ok' | 'stopped' | 'unresponsive' | 'gone';

export async function liveness(child: ManagedChild | null, healthUrl: string | null, timeoutMs = 3000): Promise<Liveness> {
  if (!child || !child.running || child.pid === undefined) return 'gone';
  const state = processState(child.pid);
  if (state === 'X' || state === 'Z') return 'gone';
  if (state === 'T' || state === 't') return 'stopped';
  if (!healthUrl) return 'ok';
  // Any answer is an answer: a 503 while loading is alive.
  if ((await healthStatus(healthUrl, timeoutMs)) !== null) return 'ok';
  return child.running ? 'unresponsive' : 'gone';
}

const RANK: Record<Liveness, number> = { ok: 0, unresponsive: 1, stopped: 2, gone: 3 };

/** The worst of several answers (a shard is as alive as its least alive process). */
export function worst(all: readonly Liveness[]): Liveness {
  return all.reduce<Liveness>((a, b) => (RANK[b] > RANK[a] ? b : a), 'ok');
}

/** A node's answer to `check`, read defensively (an older node, a malformed reply: no verdict is 'ok'). */
export function asLiveness(v: unknown): Liveness {
  return v === 'stopped' || v === 'unresponsive' || v === 'gone' ? v : 'ok';
}
