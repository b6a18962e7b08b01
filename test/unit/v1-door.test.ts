import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { DIALECT_ROUTES } from '../../src/main/core/hub/api/dialects.js';
import { declaresJson, guardRefusal, ownHostNames } from '../../src/main/core/hub/http/guard.js';
import { dialectTarget, targetPath } from '../../src/main/core/hub/api/v1-door.js';
import { ErrorCode } from '../../src/shared/errors.js';

/**
 * The generation routes answered ahead of express (hub/api/v1-door.ts): the request must reach the same route, with
 * the same checks, as express's router gave it (case-insensitive, a trailing slash allowed, the query ignored,
 * /model/NAME decoded); anything else is left to express.
 */
const req = (headers: Record<string, string>, method = 'POST'): IncomingMessage => ({ headers, method }) as unknown as IncomingMessage;

describe('the /v1 door: which requests it takes', () => {
  it('takes every dialect route, at its path and under /model/NAME, and nothing that is not a POST', () => {
    for (const r of DIALECT_ROUTES) {
      assert.equal(dialectTarget('POST', r.path)?.route, r, r.path);
      assert.deepEqual(dialectTarget('POST', `/model/m${r.path}`), { route: r, named: 'm' }, r.path);
      assert.equal(dialectTarget('GET', r.path), null, `GET ${r.path} stays with express (its 404)`);
    }
  });

  it('matches as express matched: any case, one trailing slash, the query ignored; the name as sent, decoded', () => {
    const chat = DIALECT_ROUTES.find((r) => r.path === '/v1/chat/completions')!;
    for (const url of ['/V1/Chat/Completions', '/v1/chat/completions/', '/v1/chat/completions?stream=true', '/v1/chat/completions/?a=b']) {
      assert.equal(dialectTarget('POST', url)?.route, chat, url);
    }
    assert.deepEqual(dialectTarget('POST', '/Model/Qwen%202.5/v1/chat/completions'), { route: chat, named: 'Qwen 2.5' });
    assert.deepEqual(dialectTarget('POST', '/model/%E0%A4%A/v1/chat/completions'), { route: chat, named: null }, 'malformed escapes: refused in the route shape');
  });

  it('reads the path as express did: a fragment cut, an absolute-form target (a client using the hub as its proxy) by its path', () => {
    const messages = DIALECT_ROUTES.find((r) => r.path === '/v1/messages')!;
    assert.equal(dialectTarget('POST', 'http://127.0.0.1:7070/v1/messages')?.route, messages);
    assert.equal(dialectTarget('POST', 'HTTPS://desktop.local/v1/messages?beta=true')?.route, messages);
    assert.equal(dialectTarget('POST', '/v1/messages#x')?.route, messages);
    assert.equal(targetPath('http://127.0.0.1:7070'), '/');
    assert.equal(targetPath('http://h/a?b#c'), '/a');
    assert.equal(targetPath('*'), '*', 'not a path: left as it is (express 404s it)');
  });

  it('leaves every other path to express', () => {
    for (const url of ['/v1/models', '/v1/chat', '/v1/chat/completions/extra', '/v1/chat/completions//', '/model//v1/chat/completions', '/model/m', '/model/m/', '/api/chat', '/', '']) {
      assert.equal(dialectTarget('POST', url), null, url);
    }
    assert.equal(dialectTarget(undefined, '/v1/chat/completions'), null);
    assert.equal(dialectTarget('POST', undefined), null);
  });
});

describe('the /v1 door: its checks, on the request headers alone', () => {
  it('a JSON body: the media type application/json with any parameters, and a body (a length or chunked)', () => {
    for (const t of ['application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', ' application/json ;charset=UTF-8']) {
      assert.equal(declaresJson(req({ 'content-type': t, 'content-length': '2' })), true, t);
      assert.equal(declaresJson(req({ 'content-type': t, 'transfer-encoding': 'chunked' })), true, t);
    }
    for (const t of ['text/plain', 'application/jsonx', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'json', '']) {
      assert.equal(declaresJson(req({ 'content-type': t, 'content-length': '2' })), false, t);
    }
    assert.equal(declaresJson(req({ 'content-length': '2' })), false, 'no content type');
    assert.equal(declaresJson(req({ 'content-type': 'application/json' })), false, 'no body at all (as express read it: 415)');
  });

  it("refuses a foreign Host (421's code) and another site's POST (403's), and passes a client that is not a browser", () => {
    const names = ownHostNames('127.0.0.1', [], 'desktop', {});
    assert.equal(guardRefusal(req({ host: '127.0.0.1:7070' }), names), null);
    assert.equal(guardRefusal(req({ host: 'evil.example' }), names)?.code, ErrorCode.MISDIRECTED_REQUEST);
    assert.equal(guardRefusal(req({ host: '127.0.0.1:7070', origin: 'http://evil.example' }), names)?.code, ErrorCode.FORBIDDEN);
    assert.equal(guardRefusal(req({ host: '127.0.0.1:7070', 'sec-fetch-site': 'cross-site' }), names)?.code, ErrorCode.FORBIDDEN);
    assert.equal(guardRefusal(req({ host: '127.0.0.1:7070', origin: 'http://evil.example' }, 'GET'), names), null, 'a GET changes nothing');
  });
});
