import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { startHub } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';

/** A hub with a certificate: nodes dial wss:// and trust it through the system CA store (here NODE_EXTRA_CA_CERTS). */
function selfSigned(): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'relay-tls-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], {
    stdio: 'ignore',
  });
  return { cert, key };
}

function post(url: string, ca: Buffer, path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: 'POST', ca, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Record<string, unknown> }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('hub over TLS', { timeout: 180_000 }, () => {
  it('serves https, and a node joins and serves over wss://', async () => {
    const { cert, key } = selfSigned();
    const ca = readFileSync(cert);
    const env = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
    const hub = await startHub({ env, args: ['--tls-cert', cert, '--tls-key', key] });
    try {
      assert.match(hub.url, /^https:\/\/127\.0\.0\.1:\d+$/);
      const node = await startNode(hub, { name: 'tls-node', cpuBudgetMb: 1000, env: { ...env, NODE_EXTRA_CA_CERTS: cert } });
      try {
        assert.ok(node.logs.some((l) => l.includes('"hub":"https://127.0.0.1')));
        const add = await post(hub.url, ca, '/api/models', { path: fixture('dense'), name: 'dense' });
        assert.equal(add.status, 201);
        const r = await post(hub.url, ca, '/v1/completions', { model: 'dense', prompt: 'hello', max_tokens: 4, temperature: 0 });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.equal((r.json.usage as { completion_tokens: number }).completion_tokens, 4);
      } finally {
        await node.stop();
      }
    } finally {
      await hub.stop();
    }
  });
});
