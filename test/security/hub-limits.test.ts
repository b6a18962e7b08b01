import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
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
    const r = await hub.api<{ error: { code: string; message: string } }>('/api/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name: 'huge' }) });
    assert.equal(r.status, 422);
    assert.equal(r.body.error.code, 'gguf_limit_exceeded');
    assert.match(r.body.error.message, /1073741824 exceeds the limit 16777216/);
    assert.deepEqual((await hub.api<{ models: unknown[] }>('/api/models')).body.models, []);
  });
});
