import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ApiKeys } from '../../src/main/core/hub/http/keys.js';
import { beyondLoopback } from '../../src/main/core/hub/http/guard.js';
import { cookieValue, DashboardSessions, SESSION_TTL_MS } from '../../src/main/core/hub/http/sessions.js';
import { Store } from '../../src/main/core/store/store.js';

describe('dashboard login links (pure, with a clock the test sets)', () => {
  it('a link works once and for 10 minutes; a session lasts its TTL; roles are kept', () => {
    let now = 1_000_000;
    const s = new DashboardSessions(() => now);
    const a = s.mintLink('admin');
    const r = s.mintLink('read');
    const got = s.exchange(a.token)!;
    assert.equal(got.role, 'admin');
    assert.equal(s.exchange(a.token), null, 'used');
    assert.equal(s.role(got.sid), 'admin');
    now += 10 * 60_000;
    assert.equal(s.exchange(r.token), null, 'expired after 10 minutes');
    assert.equal(s.exchange('made-up'), null);
    now += SESSION_TTL_MS;
    assert.equal(s.role(got.sid), null, 'the session expired');
    assert.equal(s.role(undefined), null);
  });

  it('reads one cookie out of a Cookie header', () => {
    assert.equal(cookieValue('a=1; relay_session=xyz; b=2', 'relay_session'), 'xyz');
    assert.equal(cookieValue('relay_sessionx=1', 'relay_session'), undefined);
    assert.equal(cookieValue(undefined, 'relay_session'), undefined);
  });
});

describe('API keys', () => {
  it('a key verifies until revoked; names are checked and unique; only digests are stored', async () => {
    const store = await Store.open(mkdtempSync(join(tmpdir(), 'relay-keys-')));
    const keys = new ApiKeys(store);
    assert.equal(keys.any, false);
    const { key } = await keys.create('laptop');
    assert.equal(keys.verify(key), 'laptop');
    assert.equal(keys.verify(`${key}x`), null);
    await assert.rejects(keys.create('laptop'), (e: Error & { code?: string }) => e.code === 'KEY_EXISTS');
    await assert.rejects(keys.create('../etc'), (e: Error & { code?: string }) => e.code === 'INVALID_ARGUMENT');
    assert.ok(!JSON.stringify(store.data).includes(key));
    assert.deepEqual(
      keys.list().map((k) => [k.name, k.prefix]),
      [['laptop', key.slice(0, 10)]],
    );
    await keys.revoke('laptop');
    assert.equal(keys.verify(key), null);
    await assert.rejects(keys.revoke('laptop'), (e: Error & { code?: string }) => e.code === 'KEY_NOT_FOUND');
    await store.close();
  });

  it('which listen addresses reach beyond this machine', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1']) assert.equal(beyondLoopback(h), false, h);
    for (const h of ['0.0.0.0', '::', '192.168.1.20']) assert.equal(beyondLoopback(h), true, h);
  });
});
