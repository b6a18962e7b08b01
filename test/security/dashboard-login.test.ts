import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { chromium, type Browser } from 'playwright-core';
import { joinHub, requestDashboardLink } from '../../src/main/core/node/link/hub-client.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { mintToken } from '../helpers/node.js';

/**
 * The dashboard from another machine. "Another machine" is a network namespace this test makes, joined to
 * this one by a veth pair with addresses the test assigns (10.213.x.0/30): chromium runs inside it, so the hub
 * sees a non-loopback client, and nothing leaves this machine. A browser there gets nothing from /status until
 * it opens a one-time link from `relay dashboard --link`; the link sets an HttpOnly, SameSite=Strict cookie.
 */
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;
const run = promisify(execFile);
const tag = String(process.pid % 100000);
const NS = `relay-ns${tag}`;
const HOST_IF = `rv${tag}a`;
const NS_IF = `rv${tag}b`;
const NET = `10.213.${process.pid % 250}`;
const HUB_ADDR = `${NET}.1`;

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });

describe('dashboard login from another machine (a network namespace)', { timeout: 180_000 }, () => {
  let hub: HubProcess;
  let browser: Browser;
  let base: string;
  before(async () => {
    ip('netns', 'add', NS);
    ip('link', 'add', HOST_IF, 'type', 'veth', 'peer', 'name', NS_IF);
    ip('link', 'set', NS_IF, 'netns', NS);
    ip('addr', 'add', `${HUB_ADDR}/30`, 'dev', HOST_IF);
    ip('link', 'set', HOST_IF, 'up');
    ip('netns', 'exec', NS, 'ip', 'addr', 'add', `${NET}.2/30`, 'dev', NS_IF);
    ip('netns', 'exec', NS, 'ip', 'link', 'set', NS_IF, 'up');
    ip('netns', 'exec', NS, 'ip', 'link', 'set', 'lo', 'up');
    hub = await startHub({ args: ['--listen', '0.0.0.0'] });
    base = `http://${HUB_ADDR}:${new URL(hub.url).port}`;
    // chromium inside the namespace: playwright talks to it over pipes, which cross namespaces.
    const wrapper = join(mkdtempSync(join(tmpdir(), 'relay-ns-')), 'chromium-in-ns');
    writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${NS} /usr/bin/chromium "$@"\n`);
    chmodSync(wrapper, 0o755);
    browser = await chromium.launch({ executablePath: wrapper, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  });
  after(async () => {
    await browser?.close();
    await hub?.stop();
    try {
      ip('netns', 'del', NS); // takes the veth pair with it
    } catch {
      /* never made */
    }
  });

  const link = async (...flags: string[]): Promise<string> => {
    const out = await run(process.execPath, [relayBin, 'dashboard', '--link', ...flags, '--hub', hub.url]);
    const url = out.stdout
      .trim()
      .split('\n')
      .find((u) => u.startsWith(`http://${HUB_ADDR}:`));
    assert.ok(url, `a link for ${HUB_ADDR} among: ${out.stdout}`);
    return url;
  };

  it('without a login a browser there gets nothing from /status or the admin API', async () => {
    const page = await browser.newPage();
    await page.goto(`${base}/`);
    const codes = await page.evaluate(async () => [
      (await fetch('/status')).status,
      (await fetch('/api/models')).status,
      (await fetch('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"paused":true}' })).status,
    ]);
    assert.deepEqual(codes, [403, 403, 403]);
    await page.locator('#banner').waitFor({ state: 'visible' });
    await page.close();
  });

  it('a one-time link logs it in (HttpOnly, SameSite=Strict cookie): rows render and pause works; the link works once', async () => {
    const url = await link();
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(url);
    assert.equal(new URL(page.url()).pathname, '/');
    await page.locator('#summary', { hasText: 'llama.cpp' }).waitFor();
    const cookie = (await ctx.cookies()).find((c) => c.name === 'relay_session')!;
    assert.deepEqual([cookie.httpOnly, cookie.sameSite], [true, 'Strict']);
    await page.getByRole('button', { name: "Pause the hub's devices" }).click();
    const st = async () => (await hub.status()).hub.paused;
    for (let i = 0; i < 100 && !(await st()); i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await st(), true);
    await page.getByRole('button', { name: "Resume the hub's devices" }).click();
    const again = await (await browser.newContext()).newPage();
    const second = await again.goto(url);
    assert.equal(second?.status(), 401, 'a used link is refused');
    await ctx.close();
  });

  it('a read-only link shows the dashboard but changes nothing', async () => {
    for (let i = 0; i < 100 && (await hub.status()).hub.paused; i++) await new Promise((r) => setTimeout(r, 50));
    const url = await link('--read-only');
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(url);
    await page.locator('#summary', { hasText: 'llama.cpp' }).waitFor();
    const status = await page.evaluate(async () => (await fetch('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"paused":true}' })).status);
    assert.equal(status, 403);
    assert.equal((await hub.status()).hub.paused, false);
    await ctx.close();
  });

  it("a node's tray asks with its credential over pinned TLS for a read-only link on the address it reaches the hub at", async () => {
    const node = { hub: base, name: 'attic', ...(await joinHub(base, await mintToken(hub), 'attic')) };
    assert.ok(node.hubCert, 'the node pinned the hub');
    const { url } = await requestDashboardLink(node);
    assert.ok(url.startsWith(`${base}/login?t=`), url);
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(url);
    await page.locator('#summary', { hasText: 'llama.cpp' }).waitFor();
    const status = await page.evaluate(async () => (await fetch('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"paused":true}' })).status);
    assert.equal(status, 403, "a node owner's login is read-only");
    await ctx.close();
    // A wrong credential gets nothing. The credential never goes over plain HTTP: a node without a pinned
    // certificate does not send it, and the hub refuses it there anyway.
    await assert.rejects(requestDashboardLink({ ...node, credential: 'nope' }), (e: Error & { code?: string }) => e.code === 'NODE_AUTH');
    await assert.rejects(requestDashboardLink({ ...node, hubCert: null }), (e: Error & { code?: string }) => e.code === 'NODE_AUTH' && /join again/.test(e.message));
    const plain = await fetch(`${hub.url}/api/nodes/dashboard-link`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer x', 'x-relay-node': 'attic' },
      body: '{}',
    });
    assert.equal(plain.status, 403);
  });
});
