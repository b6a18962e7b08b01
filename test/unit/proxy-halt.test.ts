import assert from 'node:assert/strict';
import type { RequestListener } from 'node:http';
import { describe, it } from 'node:test';
import { readAll, throughProxy } from '../helpers/proxy-harness.js';
import { model, setup, tick } from '../helpers/scheduler-doubles.js';
import { OPENAI_ERRORS } from '../../src/main/core/hub/http/errors.js';
import { ANTHROPIC_ERRORS } from '../../src/main/core/hub/api/anthropic.js';

/**
 * A placement the scheduler stops while it streams (its node's owner pauses, an eviction): llama-server stops
 * generating at SIGTERM but keeps the request's connection open until it is killed 10 s later, so the client heard
 * nothing for 10 s and then a failure. The lease's `halted` signal ends the request at once: the client's stream gets
 * its error event naming why, and the upstream connection is closed (which lets llama-server exit on SIGTERM).
 */
const TOKEN = 'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n';

describe('a placement stopped mid-stream (the lease is halted)', () => {
  it('the stream ends now with an error event naming the stop, and the upstream connection closes', async () => {
    const halt = new AbortController();
    let upstreamClosed!: () => void;
    const closed = new Promise<void>((r) => (upstreamClosed = r));
    // A llama-server that sent one token and then holds the connection, as one does after SIGTERM.
    const upstream: RequestListener = (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(TOKEN);
      req.socket.once('close', upstreamClosed);
    };
    const text = await throughProxy(
      upstream,
      OPENAI_ERRORS,
      async (res) => {
        res.once('data', () => halt.abort('node north paused (paused by the owner)'));
        return readAll(res);
      },
      halt.signal,
    );
    assert.ok(text.startsWith(TOKEN), text);
    assert.match(text, /data: \{"error":\{[^\n]*"code":"replica_failed"[^\n]*stopped: node north paused \(paused by the owner\)/);
    await closed; // resolves only once the proxy closed its upstream connection
  });

  it('Anthropic Messages: its own error event', async () => {
    const halt = new AbortController();
    const upstream: RequestListener = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(TOKEN);
    };
    const text = await throughProxy(
      upstream,
      ANTHROPIC_ERRORS,
      async (res) => {
        res.once('data', () => halt.abort('evicted (least recently used) to make room for "big"'));
        return readAll(res);
      },
      halt.signal,
    );
    assert.match(text, /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":".*stopped: evicted \(least recently used\)/);
  });
});

describe('a placement stopped or failed before it answered', () => {
  it('a halt before the first byte gives the request back as stopped, not failed: another placement takes it, no attempt spent', async () => {
    const halt = new AbortController();
    // A llama-server still evaluating the prompt when its placement is stopped.
    const upstream: RequestListener = () => halt.abort('node north paused (paused by the owner)');
    const text = await throughProxy(upstream, OPENAI_ERRORS, readAll, halt.signal);
    assert.deepEqual(JSON.parse(text), { retry: true, halted: true });
  });

  it('a placement that fails (its process exits) halts its leases too: their streams end now, not at its kill', async () => {
    const m = model('m', 100);
    const { scheduler, launcher } = setup({ hubMb: 1000, models: [m] });
    const pending = scheduler.acquire('m');
    const start = await launcher.nth(0);
    start.ok();
    const lease = await pending;
    assert.equal(lease.halted.aborted, false);
    start.crash();
    await tick();
    await tick();
    assert.equal(lease.halted.aborted, true);
    assert.match(String(lease.halted.reason), /exited unexpectedly/);
  });
});
