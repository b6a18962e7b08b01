import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { freePort } from '../../src/main/core/llama/index.js';
import { until } from '../helpers/proc.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startHub, type HubProcess } from '../helpers/hub.js';

/** Slow and hostile input against a real `relay hub` process: refused with a code, the hub keeps serving. */
describe('hub limits', { timeout: 120_000 }, () => {
  let hub: HubProcess;
  before(async () => {
    hub = await startHub({ env: { RELAY_REQUEST_TIMEOUT_MS: '2000' } });
  });
  after(async () => {
    await hub?.stop();
  });

  it('a trickled request body gets 408 and its socket closed (RELAY_REQUEST_TIMEOUT_MS)', async () => {
    const u = new URL(hub.url);
    const answer = await new Promise<string>((resolve, reject) => {
      const sock = connect(Number(u.port), u.hostname, () => {
        sock.write(`POST /v1/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"mo`);
      });
      let got = '';
      sock.on('data', (c: Buffer) => (got += c.toString()));
      sock.on('close', () => resolve(got));
      sock.on('error', reject);
      setTimeout(() => reject(new Error(`no answer within 20 s: ${got}`)), 20_000).unref();
    });
    assert.match(answer, /^HTTP\/1\.1 408/);
    assert.equal((await hub.api('/api/models')).status, 200, 'the hub keeps serving');
  });

  it('the Ollama port has the same connection cap: idle sockets past RELAY_MAX_CONNECTIONS are closed, the port serves on', async () => {
    const capped = await startHub({ env: { RELAY_MAX_CONNECTIONS: '8' }, args: ['--ollama-port', String(await freePort())] });
    const u = new URL(capped.ollamaUrl!);
    const open = (): Promise<{ sock: Socket; closed: Promise<void> }> =>
      new Promise((resolve) => {
        const sock = connect(Number(u.port), u.hostname, () => resolve({ sock, closed: new Promise((r) => sock.once('close', () => r())) }));
        sock.on('error', () => undefined);
      });
    try {
      const idle = [];
      for (let i = 0; i < 8; i++) idle.push(await open());
      const ninth = await open();
      await ninth.closed; // the server drops a connection over its cap at once
      for (const c of idle) c.sock.destroy();
      await Promise.all(idle.map((c) => c.closed));
      const r = await until(
        () =>
          fetch(`${capped.ollamaUrl}/api/version`).then(
            (x) => x.status,
            () => 0,
          ),
        (s) => s === 200,
      );
      assert.equal(r, 200, 'the port serves again once they are gone');
    } finally {
      await capped.stop();
    }
  });

  it('a crafted GGUF whose header claims a 2^30-element array is refused before anything is read into memory', async () => {
    const b = Buffer.alloc(64);
    let o = b.write('GGUF', 0, 'latin1');
    o = b.writeUInt32LE(3, o);
    o = b.writeBigUInt64LE(0n, o); // tensors
    o = b.writeBigUInt64LE(1n, o); // metadata keys
    o = b.writeBigUInt64LE(1n, o);
    o += b.write('x', o, 'latin1');
    o = b.writeUInt32LE(9, o); // ARRAY
    o = b.writeUInt32LE(0, o); // of UINT8
    b.writeBigUInt64LE(1n << 30n, o);
    const path = join(mkdtempSync(join(tmpdir(), 'relay-gguf-')), 'huge-array.gguf');
    writeFileSync(path, b);
    const r = await hub.api<{ error: { code: string; message: string } }>('/api/models', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path, name: 'huge' }),
    });
    assert.equal(r.status, 422);
    assert.equal(r.body.error.code, 'gguf_limit_exceeded');
    assert.match(r.body.error.message, /1073741824 exceeds the limit 16777216/);
    assert.deepEqual((await hub.api<{ models: unknown[] }>('/api/models')).body.models, []);
  });

  it('a GGUF header with millions of entries is parsed off the event loop: the API answers meanwhile', async () => {
    // One metadata array of 2^24 - 1 UINT32 items (64 MiB, inside the reader's limit): seconds of parsing.
    const items = (1 << 24) - 1;
    const head = Buffer.alloc(64);
    let o = head.write('GGUF', 0, 'latin1');
    o = head.writeUInt32LE(3, o);
    o = head.writeBigUInt64LE(0n, o);
    o = head.writeBigUInt64LE(1n, o);
    o = head.writeBigUInt64LE(1n, o);
    o += head.write('x', o, 'latin1');
    o = head.writeUInt32LE(9, o); // ARRAY
    o = head.writeUInt32LE(4, o); // of UINT32
    o = head.writeBigUInt64LE(BigInt(items), o);
    const path = join(mkdtempSync(join(tmpdir(), 'relay-gguf-')), 'long-array.gguf');
    writeFileSync(path, Buffer.concat([head.subarray(0, o), Buffer.alloc(items * 4)]));
    const order: string[] = [];
    const post = hub
      .api<{ error: { code: string } }>('/api/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name: 'long' }) })
      .then((r) => (order.push('register'), r));
    await new Promise((r) => setTimeout(r, 100)); // the registration has reached the hub and its parse has begun
    const list = await hub.api<{ models: unknown[] }>('/api/models').then((r) => (order.push('list'), r));
    const r = await post;
    assert.equal(list.status, 200);
    assert.deepEqual(order, ['list', 'register'], 'the list was answered while the header was still being parsed');
    assert.equal(r.status, 422, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'gguf_not_a_model', 'a header with no architecture and no tensors is no model');
    assert.deepEqual((await hub.api<{ models: unknown[] }>('/api/models')).body.models, [], 'nothing registered');
  });
});
