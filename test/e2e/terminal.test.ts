import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { addModel, startHub } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { mintToken } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * `relay up` on a terminal (a pseudo-terminal from util-linux's `script`): a weight push shows as a bar
 * redrawn in place with its rate, and ends as a finished line. (Off a terminal the log gets plain lines:
 * the unit tests and every other test's logs.)
 */
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

describe('relay up on a terminal', { timeout: 120_000 }, () => {
  it('a weight push is a progress bar with its rate, redrawn in place, then a finished line', async () => {
    const hub = await startHub({ env: ENV });
    const home = mkdtempSync(join(tmpdir(), 'relay-node-tty-'));
    const token = await mintToken(hub);
    const cmd = `${process.execPath} ${relayBin} up --hub ${hub.url} --token ${token} --name tty --home ${home} --cpu-budget-mb 1000`;
    const tty = spawn('script', ['-qfec', cmd, '/dev/null'], {
      detached: true,
      env: { ...process.env, ...ENV, RELAY_HEARTBEAT_MS: '500', RELAY_LOG_LEVEL: 'warn' },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    let out = '';
    tty.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = once(tty, 'exit');
    try {
      await until(
        () => out,
        (o) => /connected to/.test(o),
        60_000,
      );
      const m = await addModel(hub, { path: fixture('dense'), name: 'm' });
      const r = await fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', prompt: 'hi', max_tokens: 2 }) });
      assert.equal(r.status, 200);
      const shown = await until(
        () => out,
        (o) => /done in/.test(o),
        30_000,
      );
      const frames = shown.split('\r\x1b[K').filter((f) => f.startsWith('receiving'));
      assert.ok(frames.length >= 1, shown);
      assert.match(frames[frames.length - 1]!, new RegExp(`^receiving ${m.sha256.slice(0, 12)}… \\[#+\\] 100%  [\\d.]+ MB/s  done in \\d+:\\d\\d\\r?\\n`));
    } finally {
      process.kill(-tty.pid!, 'SIGTERM');
      await exited;
      await hub.stop();
      rmSync(home, { recursive: true, force: true });
    }
  });
});
