import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { hostAllowed, hostOf, ownHostNames, pageCsp, sameOrigin } from '../../src/main/core/hub/http/guard.js';
import { isClientRoute, originMatcher } from '../../src/main/core/hub/http/origins.js';

describe('browser guard (pure)', () => {
  const names = ownHostNames('0.0.0.0', ['relay.example'], 'Desktop', { eth0: [{ address: '192.168.1.20', netmask: '', family: 'IPv4', mac: '', internal: false, cidr: null }] });

  it('the hub answers to loopback, its addresses, its machine name (short, as given, .local) and the names its owner lists, nothing else', () => {
    for (const h of ['localhost:7070', '127.0.0.1:7070', '127.8.0.1', '[::1]:7070', '192.168.1.20:7070', 'desktop:7070', 'Desktop.local:7070', 'desktop.local.', 'relay.example']) {
      assert.equal(hostAllowed(h, names), true, h);
    }
    // The machine's name under another domain is a rebinding page's name, not the hub's (list it to allow it).
    for (const h of ['evil.example', 'desktop-evil.com', 'evildesktop.lan', 'desktop.attacker.example', 'desktop.lan', 'desktop.fritz.box', '192.168.1.21', '', 'a b', 'localhost:99999999']) {
      assert.equal(hostAllowed(h, names), false, h);
    }
    assert.equal(hostAllowed(undefined, names), true, 'HTTP/1.0 without Host');
    assert.equal(hostOf('[::1]:80'), '::1');
  });

  it('state-changing requests: same origin or no browser only', () => {
    assert.equal(sameOrigin(undefined, undefined, '127.0.0.1:7070'), true, 'curl, the CLI, the openai SDK');
    assert.equal(sameOrigin('http://127.0.0.1:7070', 'same-origin', '127.0.0.1:7070'), true);
    assert.equal(sameOrigin(undefined, 'none', '127.0.0.1:7070'), true, 'typed in the address bar');
    assert.equal(sameOrigin('http://localhost:7070', undefined, '127.0.0.1:7070'), false, 'another origin of the same machine');
    assert.equal(sameOrigin('http://127.0.0.1:3000', 'same-site', '127.0.0.1:7070'), false, 'another port');
    assert.equal(sameOrigin(undefined, 'cross-site', '127.0.0.1:7070'), false);
    assert.equal(sameOrigin('null', undefined, '127.0.0.1:7070'), false);
    assert.equal(sameOrigin('not a url', undefined, '127.0.0.1:7070'), false);
  });

  it('the page CSP names each inline script by hash', () => {
    const csp = pageCsp('<script>a()</script><p></p><script>b()</script>');
    assert.equal(csp.match(/'sha256-/g)?.length, 2);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.match(pageCsp('<p>no script</p>'), /script-src 'none'/);
    assert.match(pageCsp('<script src="/ui/charts.js"></script><script>c()</script>'), /script-src 'self' 'sha256-[^' ]+'(;|$)/, "the page's own files under /ui/, its inline script by hash");
  });
});

describe('one code table per wire', () => {
  it('every code survives the trip node → hub; an unknown one reads as upstream_error; HTTP uses the same spelling', async () => {
    const { ErrorCode, RelayError, fromWireCode, httpError, wireCode } = await import('../../src/shared/errors.js');
    for (const c of Object.values(ErrorCode)) assert.equal(fromWireCode(wireCode(c)), c);
    assert.equal(fromWireCode('model_unavailable'), ErrorCode.MODEL_UNAVAILABLE);
    assert.equal(fromWireCode('something_newer'), ErrorCode.UPSTREAM_ERROR);
    assert.equal(fromWireCode(undefined), ErrorCode.UPSTREAM_ERROR);
    const e = new RelayError(fromWireCode('model_unavailable'), 'node kitchen is paused');
    assert.deepEqual([httpError(e).status, httpError(e).body.error.code], [503, 'model_unavailable']);
  });
});

describe('allowed browser origins (RELAY_ORIGINS), pure', () => {
  it('matches with * wildcards, case-insensitively, the whole origin', () => {
    const ok = originMatcher(['http://localhost:*', 'vscode-webview://*', 'https://chat.home.lan']);
    assert.deepEqual(
      ['http://localhost:8080', 'http://LOCALHOST:3000', 'vscode-webview://abc', 'https://chat.home.lan', 'http://localhost.evil.com', 'https://chat.home.lan.evil.com', 'http://127.0.0.1:3000'].map(
        ok,
      ),
      [true, true, true, true, false, false, false],
    );
  });

  it('the client routes only: generation and listing, not the owner API', () => {
    assert.deepEqual(['/v1/chat/completions', '/api/chat', '/api/tags?x=1', '/model/qwen/infill', '/api/models', '/api/nodes/token', '/api/pull', '/status'].map(isClientRoute), [
      true,
      true,
      true,
      true,
      false,
      false,
      false,
      false,
    ]);
  });
});
