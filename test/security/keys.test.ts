import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { startHub, type HubProcess } from '../helpers/hub.js';

/**
 * A hub that listens beyond loopback serves /v1 only with an API key, so a guest on the Wi-Fi gets nothing.
 * Keys have names, are stored as SHA-256 digests, and are made and revoked from the CLI and the dashboard.
 * (The requests come from 127.0.0.1: the rule depends on where the hub listens, not on who asks.)
 */
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;
const run = promisify(execFile);

describe('API keys on a LAN hub', { timeout: 120_000 }, () => {
  let hub: HubProcess;
  const v1 = (key?: string) => fetch(`${hub.url}/v1/models`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  before(async () => {
    hub = await startHub({ args: ['--listen', '0.0.0.0'] });
  });
  after(async () => {
    await hub?.stop();
  });

  it('without any key, /v1 refuses and says how to make one; the hub warned at start', async () => {
    const r = await v1();
    assert.equal(r.status, 401);
    const j = (await r.json()) as { error: { code: string; message: string } };
    assert.equal(j.error.code, 'invalid_api_key');
    assert.match(j.error.message, /listens on 0\.0\.0\.0.*relay keys create NAME/);
    assert.ok(hub.logs.some((l) => l.includes('relay keys create')));
  });

  it('relay keys create / ls / revoke: the key works until revoked; relay.json holds only its digest', async () => {
    const made = await run(process.execPath, [relayBin, 'keys', 'create', 'laptop', '--hub', hub.url]);
    const key = made.stdout.trim();
    assert.match(key, /^relay-[A-Za-z0-9_-]{32}$/);
    assert.equal((await v1(key)).status, 200);
    assert.equal((await v1(`${key}x`)).status, 401);
    const store = readFileSync(join(hub.home, 'relay.json'), 'utf8');
    assert.ok(!store.includes(key), 'no plaintext key in the store');
    assert.match(store, /"sha256": "[0-9a-f]{64}"/);
    const ls = await run(process.execPath, [relayBin, 'keys', 'ls', '--hub', hub.url]);
    assert.match(ls.stdout, /^\/v1 requires a key\nlaptop\s+relay-/);
    const dup = await run(process.execPath, [relayBin, 'keys', 'create', 'laptop', '--hub', hub.url]).catch((e: { stderr: string }) => e);
    assert.match(dup.stderr, /key_exists/);
    await run(process.execPath, [relayBin, 'keys', 'revoke', 'laptop', '--hub', hub.url]);
    assert.equal((await v1(key)).status, 401);
  });

  it('the dashboard makes a key (shown once, with a copy button) and revokes it', async () => {
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
    try {
      const page = await browser.newPage();
      await page.goto(hub.url);
      await page.getByLabel('New key named').fill('phone');
      await page.getByRole('button', { name: 'Create key' }).click();
      const shown = page.locator('#new-key-value');
      await shown.waitFor();
      const key = (await shown.innerText()).trim();
      assert.equal((await v1(key)).status, 200);
      const row = page.getByRole('table', { name: 'API keys' }).getByRole('row').filter({ hasText: 'phone' });
      await row.waitFor();
      await page.getByRole('button', { name: 'Revoke key phone' }).click();
      await row.waitFor({ state: 'detached' });
      assert.equal((await v1(key)).status, 401);
    } finally {
      await browser.close();
    }
  });
});
