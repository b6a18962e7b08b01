import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { throughProxy } from '../helpers/proxy-harness.js';
import { OPENAI_ERRORS } from '../../src/main/core/hub/http/errors.js';

/**
 * A long answer to a slow client: llama-server waits (the proxy pauses it) each time the client's socket is full.
 * Each wait used to add a 'close' listener to the upstream socket for the whole answer, so a long stream collected
 * thousands (Node's MaxListenersExceededWarning, and memory kept per request). One wait at a time, one listener.
 */
describe('backpressure on a long answer to a slow client', () => {
  it('pauses llama-server as often as the client needs, without collecting listeners', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    const chunk = `data: ${JSON.stringify({ choices: [{ delta: { content: 'x'.repeat(64 * 1024) } }] })}\n\n`;
    const chunks = 1000; // ~64 MB: the loopback socket buffers (a few MB) fill and empty again dozens of times
    let paused = 0;
    try {
      const got = await throughProxy(
        (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          let i = 0;
          const more = (): void => {
            while (i < chunks) {
              i++;
              if (!res.write(chunk)) {
                paused++;
                res.once('drain', more);
                return;
              }
            }
            res.end();
          };
          more();
        },
        OPENAI_ERRORS,
        (res: IncomingMessage) =>
          new Promise((resolve) => {
            // A client slower than the hub: after each piece it takes, it waits a millisecond.
            let bytes = 0;
            res.on('data', (c: Buffer) => {
              bytes += c.length;
              res.pause();
              setTimeout(() => res.resume(), 1);
            });
            res.on('end', () => resolve(String(bytes)));
          }),
      );
      assert.equal(Number(got), chunk.length * chunks, 'every byte arrived');
      assert.ok(paused > 10, `llama-server was made to wait ${paused} times`);
      assert.deepEqual(
        warnings.filter((w) => /MaxListeners/.test(w)),
        [],
      );
    } finally {
      process.off('warning', onWarning);
    }
  });
});
