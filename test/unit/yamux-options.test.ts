import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { SESSION_DEFAULTS, verifySessionOptions } from '../../src/main/core/tunnel/yamux/session.js';

describe('yamux session options (DefaultConfig / VerifyConfig)', () => {
  it('fills every option from the defaults and raises a batch to one full frame', () => {
    const r = verifySessionOptions({ client: true, maxFrameBytes: 512 * 1024 });
    assert.equal(r.client, true);
    assert.equal(r.streamWindow, SESSION_DEFAULTS.streamWindow);
    assert.equal(r.priorityLevels, 4);
    assert.equal(r.maxBatchBytes, 512 * 1024 + 12);
    assert.equal(verifySessionOptions({ client: false, keepAliveIntervalMs: undefined }).keepAliveIntervalMs, 15_000);
  });

  it('refuses what cannot work, with INVALID_ARGUMENT naming the option', () => {
    for (const [o, re] of [
      [{ streamWindow: 1024 }, /streamWindow must be at least 262144/],
      [{ maxStreams: 0 }, /maxStreams must be a positive integer/],
      [{ priorityLevels: 1.5 }, /priorityLevels must be a positive integer/],
      [{ priorityLevels: 64 }, /at most 16/],
      [{ keepAliveIntervalMs: 1000, keepAliveTimeoutMs: 0 }, /needs keepAliveTimeoutMs/],
      [{ keepAliveIntervalMs: -1 }, /keepAliveIntervalMs must be >= 0/],
    ] as const) {
      assert.throws(
        () => verifySessionOptions({ client: true, ...o }),
        (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT') && re.test(e.message),
        JSON.stringify(o),
      );
    }
  });
});
