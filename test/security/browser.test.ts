import assert from 'node:assert/strict';
import http from 'node:http';
import { hostname } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';

/**
 * What a web page the hub's owner visits can do to the hub: nothing. Each attack runs against a real `relay hub`
 * process on 127.0.0.1 and the test checks the refusal and that the registry did not change. (The dashboard's own
 * buttons, which these defences must not break, are exercised in test/e2e/dashboard.test.ts in chromium.)
 */
function raw(url: string, o: { method?: string; path: string; headers?: Record<string, string>; body?: string }): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, method: o.method ?? 'GET', path: o.path, headers: o.headers }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(o.body);
  });
}

describe('the admin API against browsers', { timeout: 120_000 }, () => {
  let hub: HubProcess;
  const host = (): string => new URL(hub.url).host;
  const models = async (): Promise<string[]> => (await hub.api<{ models: { name: string }[] }>('/api/models')).body.models.map((m) => m.name);
  before(async () => {
    hub = await startHub({ args: ['--cpu-budget-mb', '1000'] });
    await addModel(hub, { path: fixture('dense'), name: 'dense' });
  });
  after(async () => {
    await hub?.stop();
  });

  const evilAdd = JSON.stringify({ path: fixture('dense'), name: 'evil' });

  it('a cross-origin text/plain POST (no preflight) is refused with 403 and registers nothing', async () => {
    const r = await raw(hub.url, { method: 'POST', path: '/api/models', headers: { origin: 'http://evil.example', 'content-type': 'text/plain' }, body: evilAdd });
    assert.equal(r.status, 403);
    assert.equal((JSON.parse(r.body) as { error: { code: string } }).error.code, 'forbidden');
    assert.deepEqual(await models(), ['dense']);
  });

  it('Sec-Fetch-Site cross-site or same-site is refused even without Origin; an opaque "null" origin too', async () => {
    for (const headers of [{ 'sec-fetch-site': 'cross-site' }, { 'sec-fetch-site': 'same-site' }, { origin: 'null' }] as Record<string, string>[]) {
      const r = await raw(hub.url, { method: 'POST', path: '/api/models', headers: { ...headers, 'content-type': 'application/json' }, body: evilAdd });
      assert.equal(r.status, 403, JSON.stringify(headers));
    }
    const revoke = await raw(hub.url, { method: 'POST', path: '/api/nodes/garage/revoke', headers: { origin: 'http://evil.example' } });
    assert.equal(revoke.status, 403);
    const pause = await raw(hub.url, { method: 'POST', path: '/api/hub/availability', headers: { origin: 'http://evil.example', 'content-type': 'application/json' }, body: '{"paused":true}' });
    assert.equal(pause.status, 403);
    assert.equal((await hub.status()).hub.paused, false);
    assert.deepEqual(await models(), ['dense']);
  });

  it('a JSON endpoint refuses any other content type with 415, even from the same origin; /v1 too', async () => {
    const same = await raw(hub.url, { method: 'POST', path: '/api/models', headers: { origin: hub.url, 'content-type': 'text/plain' }, body: evilAdd });
    assert.equal(same.status, 415);
    assert.equal((JSON.parse(same.body) as { error: { code: string } }).error.code, 'unsupported_media_type');
    const v1 = await raw(hub.url, { method: 'POST', path: '/v1/completions', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ model: 'dense', prompt: 'x' }) });
    assert.equal(v1.status, 415);
    assert.deepEqual(await models(), ['dense']);
  });

  it('the generation routes (answered ahead of express) refuse the same: another Host, another site, in their own shape, framing headers set', async () => {
    const chat = JSON.stringify({ model: 'dense', messages: [{ role: 'user', content: 'x' }] });
    const rebound = await raw(hub.url, { method: 'POST', path: '/v1/messages', headers: { host: 'evil.example:7070', 'content-type': 'application/json' }, body: chat });
    assert.equal(rebound.status, 421);
    assert.equal((JSON.parse(rebound.body) as { type: string }).type, 'error', "Anthropic's shape on its route");
    assert.doesNotMatch(rebound.body, /dense/);
    const page = await raw(hub.url, { method: 'POST', path: '/model/dense/v1/chat/completions', headers: { origin: 'http://evil.example', 'content-type': 'application/json' }, body: chat });
    assert.equal(page.status, 403);
    assert.equal((JSON.parse(page.body) as { error: { code: string } }).error.code, 'forbidden');
    for (const r of [rebound, page]) {
      assert.equal(r.headers['x-frame-options'], 'DENY');
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
    }
  });

  it("a Host that is not the hub's own name (DNS rebinding) gets 421, reads included", async () => {
    for (const path of ['/api/models', '/status', '/', '/v1/models']) {
      const r = await raw(hub.url, { path, headers: { host: 'evil.example:7070' } });
      assert.equal(r.status, 421, path);
      assert.doesNotMatch(r.body, /dense/);
    }
    const ok = await raw(hub.url, { path: '/api/models', headers: { host: `localhost:${new URL(hub.url).port}` } });
    assert.equal(ok.status, 200);
  });

  it("a rebinding page under the machine's own name in another domain (<hostname>.attacker.example) gets 421 and no key", async () => {
    const evil = `${hostname().split('.')[0]!.toLowerCase()}.attacker.example:${new URL(hub.url).port}`;
    // Host and Origin agree: the page's own origin, which DNS rebinding sent to 127.0.0.1 (loopback is admin).
    const r = await raw(hub.url, { method: 'POST', path: '/api/keys', headers: { host: evil, origin: `http://${evil}`, 'content-type': 'application/json' }, body: '{"name":"stolen"}' });
    assert.equal(r.status, 421);
    assert.equal((JSON.parse(r.body) as { error: { code: string } }).error.code, 'misdirected_request');
    for (const path of ['/api/nodes/token', '/api/dashboard/links']) {
      const t = await raw(hub.url, { method: 'POST', path, headers: { host: evil, origin: `http://${evil}`, 'content-type': 'application/json' }, body: '{}' });
      assert.equal(t.status, 421, path);
    }
    const keys = await hub.api<{ keys: { name: string }[] }>('/api/keys');
    assert.deepEqual(keys.body.keys, [], 'no key was made');
    // The machine's name as the system gives it and its .local name still work.
    const local = await raw(hub.url, { path: '/api/models', headers: { host: `${hostname().split('.')[0]!}.local:${new URL(hub.url).port}` } });
    assert.equal(local.status, 200);
  });

  it('the same-origin dashboard may post; the page cannot be framed and runs only its own script', async () => {
    const same = await raw(hub.url, {
      method: 'POST',
      path: '/api/hub/availability',
      headers: { origin: hub.url, 'sec-fetch-site': 'same-origin', 'content-type': 'application/json', host: host() },
      body: '{"paused":false}',
    });
    assert.equal(same.status, 200);
    const page = await raw(hub.url, { path: '/' });
    assert.equal(page.headers['x-frame-options'], 'DENY');
    const csp = String(page.headers['content-security-policy']);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    assert.doesNotMatch(csp, /unsafe-inline'[^;]*script|script-src[^;]*unsafe/);
    // 'self' is the page's own scripts under /ui/: those files by name, nothing else from that folder or above it.
    const own = await raw(hub.url, { path: '/ui/picture.js' });
    assert.equal(own.status, 200);
    assert.match(String(own.headers['content-type']), /^text\/javascript/);
    for (const path of ['/ui/nope.js', '/ui/..%2findex.html', '/ui/%2e%2e%2f%2e%2e%2fpackage.json', '/ui/README.md']) assert.equal((await raw(hub.url, { path })).status, 404, path);
  });
});

describe('browser origins the owner allows (RELAY_ORIGINS): the client routes only', { timeout: 120_000 }, () => {
  let hub: HubProcess;
  before(async () => {
    hub = await startHub({ env: { RELAY_ORIGINS: 'http://localhost:*, vscode-webview://*' } });
  });
  after(async () => {
    await hub?.stop();
  });
  const post = (path: string, origin: string) =>
    raw(hub.url, { method: 'POST', path, headers: { origin, 'content-type': 'application/json', host: new URL(hub.url).host }, body: JSON.stringify({ model: 'none', messages: [] }) });

  it("a local web UI's page calls Ollama's and OpenAI's routes, with CORS; a preflight is answered", async () => {
    for (const path of ['/api/chat', '/v1/chat/completions']) {
      const r = await post(path, 'http://localhost:3000');
      assert.notEqual(r.status, 403, `${path}: ${r.body}`);
      assert.equal(r.headers['access-control-allow-origin'], 'http://localhost:3000');
    }
    const pre = await raw(hub.url, {
      method: 'OPTIONS',
      path: '/v1/chat/completions',
      headers: { origin: 'vscode-webview://1a2b3c', 'access-control-request-method': 'POST', host: new URL(hub.url).host },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], 'vscode-webview://1a2b3c');
    assert.match(String(pre.headers['access-control-allow-headers']), /authorization/);
  });

  it("the allowed page reads the hub's refusals too (a body that is not JSON): not a bare CORS failure", async () => {
    for (const path of ['/api/chat', '/v1/chat/completions']) {
      const r = await raw(hub.url, { method: 'POST', path, headers: { origin: 'http://localhost:3000', 'content-type': 'text/plain', host: new URL(hub.url).host }, body: 'hello' });
      assert.ok(r.status >= 400 && r.status < 500 && r.status !== 403, `${path}: ${r.status} ${r.body}`);
      assert.equal(r.headers['access-control-allow-origin'], 'http://localhost:3000', path);
      assert.match(r.body, /application\/json/, `${path}: the reason, in its dialect`);
    }
  });

  it("never the owner's API, and never an origin it did not list", async () => {
    const admin = await raw(hub.url, {
      method: 'POST',
      path: '/api/models',
      headers: { origin: 'http://localhost:3000', 'content-type': 'application/json', host: new URL(hub.url).host },
      body: '{}',
    });
    assert.equal(admin.status, 403);
    assert.equal(admin.headers['access-control-allow-origin'], undefined);
    const other = await post('/api/chat', 'https://evil.example');
    assert.equal(other.status, 403);
    assert.equal(other.headers['access-control-allow-origin'], undefined);
  });
});
