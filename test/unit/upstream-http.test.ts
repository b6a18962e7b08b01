import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { describe, it } from 'node:test';
import { ChunkedBody, openUpstream, parseHead, postUpstream, type UpstreamHead } from '../../src/main/core/hub/proxy/upstream-http.js';
import type { Lease } from '../../src/main/core/scheduler/placements/placement.js';

/** A chunked body as cpp-httplib writes one: a chunk per SSE event, hex sizes, the last chunk, no trailer. */
function chunkedOf(parts: string[], trailer = ''): Buffer {
  const body = parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('');
  return Buffer.from(`${body}0\r\n${trailer}\r\n`);
}

const EVENTS = ['data: {"choices":[{"text":" the"}]}\n\n', 'data: {"choices":[{"text":" fox é"}]}\n\n', `data: ${'x'.repeat(300)}\n\n`, 'data: [DONE]\n\n'];

/** Feed `wire` cut at the given offsets; what was passed on, the payload, and when it was done. */
function feed(wire: Buffer, cuts: number[]): { forward: Buffer; payload: Buffer; doneAt: number; passedOnAt: number[] } {
  const r = new ChunkedBody();
  const forward: Buffer[] = [];
  const payload: Buffer[] = [];
  const passedOnAt: number[] = [];
  let doneAt = -1;
  const bounds = [0, ...cuts, wire.byteLength];
  for (let k = 0; k + 1 < bounds.length; k++) {
    const got = r.read(wire.subarray(bounds[k], bounds[k + 1]));
    forward.push(...got.forward);
    payload.push(...got.payload);
    passedOnAt.push(Buffer.concat(forward).byteLength);
    if (got.done && doneAt < 0) doneAt = k;
  }
  return { forward: Buffer.concat(forward), payload: Buffer.concat(payload), doneAt, passedOnAt };
}

/** Where each chunk of chunkedOf(parts) ends on the wire (and 0): the only places forwarding may stop. */
function chunkEnds(parts: string[]): Set<number> {
  const ends = new Set([0]);
  let at = 0;
  for (const p of parts) ends.add((at += `${Buffer.byteLength(p).toString(16)}\r\n`.length + Buffer.byteLength(p) + 2));
  return ends;
}

describe('upstream HTTP: the chunked body', () => {
  const wire = chunkedOf(EVENTS);
  const bodyOnly = wire.subarray(0, wire.byteLength - '0\r\n\r\n'.length);

  it('passes on the bytes it read, framing included, except the last chunk; the payload is the body', () => {
    const one = feed(wire, []);
    assert.equal(one.forward.toString('latin1'), bodyOnly.toString('latin1'));
    assert.equal(one.payload.toString('utf8'), EVENTS.join(''));
    assert.equal(one.doneAt, 0);
  });

  it('gives the same at every cut, and every pair of cuts, passing on only whole chunks (a cut chunk is held)', () => {
    const ends = chunkEnds(EVENTS);
    for (let a = 1; a < wire.byteLength; a++) {
      const x = feed(wire, [a]);
      assert.equal(x.forward.toString('latin1'), bodyOnly.toString('latin1'), `cut at ${a}`);
      assert.equal(x.payload.toString('utf8'), EVENTS.join(''), `cut at ${a}`);
      assert.equal(x.doneAt, 1, `done only with the last byte (cut at ${a})`);
      assert.ok(
        x.passedOnAt.every((n) => ends.has(n)),
        `what went on after each read ends where a chunk ends (cut at ${a}: ${x.passedOnAt.join(', ')})`,
      );
      for (let b = a + 1; b < wire.byteLength; b += 7) {
        const y = feed(wire, [a, b]);
        assert.equal(y.forward.toString('latin1'), bodyOnly.toString('latin1'), `cuts at ${a}, ${b}`);
        assert.equal(y.payload.toString('utf8'), EVENTS.join(''), `cuts at ${a}, ${b}`);
        assert.ok(
          y.passedOnAt.every((n) => ends.has(n)),
          `cuts at ${a}, ${b}`,
        );
      }
    }
  });

  it('reads chunk extensions and a trailer, and passes neither the last chunk nor the trailer on', () => {
    const w = Buffer.from('5;name=v\r\nhello\r\n0\r\nx-end: 1\r\n\r\n');
    for (let a = 1; a < w.byteLength; a++) {
      const x = feed(w, [a]);
      assert.equal(x.forward.toString(), '5;name=v\r\nhello\r\n', `cut at ${a}`);
      assert.equal(x.payload.toString(), 'hello');
      assert.equal(x.doneAt, 1);
    }
  });

  it('refuses a bad size, a missing CRLF after data and an endless size line', () => {
    assert.throws(() => new ChunkedBody().read(Buffer.from('zz\r\nab\r\n')), /bad chunk size/);
    assert.throws(() => new ChunkedBody().read(Buffer.from('2\r\nabXY')), /CRLF/);
    assert.throws(() => new ChunkedBody().read(Buffer.alloc(2000, 0x31)), /too long/);
  });
});

describe('upstream HTTP: the response head', () => {
  it('reads status, headers (lower-cased) and the body bytes after the head; null until the blank line', () => {
    const raw = Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe');
    assert.equal(parseHead(raw.subarray(0, 40)), null);
    const p = parseHead(raw)!;
    assert.deepEqual(p.head, { status: 200, headers: { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' }, chunked: true });
    assert.equal(p.rest.toString(), '5\r\nhe');
  });

  it('refuses what is not an HTTP/1.x response, and a head that never ends', () => {
    assert.throws(() => parseHead(Buffer.from('SSH-2.0-OpenSSH\r\n\r\n')), /not an HTTP\/1\.1 response/);
    assert.throws(() => parseHead(Buffer.alloc(70 * 1024, 0x61)), /too long/);
  });
});

/** A server that reads one request and answers with `answer` written in the pieces given (then closes, or not). */
async function serverAnswering(pieces: Buffer[], opts: { close?: boolean } = {}): Promise<{ port: number; request: Promise<string>; close: () => void }> {
  let gotRequest!: (s: string) => void;
  const request = new Promise<string>((r) => (gotRequest = r));
  const srv = createServer((s: Socket) => {
    let seen = '';
    s.on('data', (c: Buffer) => {
      seen += c.toString('latin1');
      const end = seen.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length: (\d+)/i.exec(seen)?.[1] ?? 0);
      if (seen.length < end + 4 + length) return;
      gotRequest(seen);
      const write = (k: number): void => {
        if (k === pieces.length) return void (opts.close === false ? undefined : s.end());
        s.write(pieces[k]!, () => setImmediate(() => write(k + 1)));
      };
      write(0);
    });
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  return { port: (srv.address() as AddressInfo).port, request, close: () => srv.close() };
}

type Seen = { head?: UpstreamHead; forward: string; payload: string; ended: boolean; broken?: string };
function post(port: number, body: string, socket: Duplex = connect({ port, host: '127.0.0.1' })): Promise<Seen> {
  return new Promise((resolve) => {
    const seen: Seen = { forward: '', payload: '', ended: false };
    postUpstream(
      socket,
      { path: '/v1/completions', host: `127.0.0.1:${port}`, accept: '*/*', body: Buffer.from(body) },
      {
        head: (h) => (seen.head = h),
        body: (f, p) => {
          seen.forward += Buffer.concat(f).toString('latin1');
          seen.payload += Buffer.concat(p).toString('utf8');
        },
        end: () => resolve({ ...seen, ended: true }),
        broken: (why) => resolve({ ...seen, broken: why }),
      },
    );
  });
}

describe('upstream HTTP: one POST on a real socket', () => {
  it('sends the request with its length and Connection: close, and reads a chunked answer cut anywhere', async () => {
    const wire = Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n'), chunkedOf(EVENTS)]);
    const srv = await serverAnswering([wire.subarray(0, 30), wire.subarray(30, 95), wire.subarray(95, 96), wire.subarray(96)], { close: false });
    const seen = await post(srv.port, '{"prompt":"é"}');
    srv.close();
    const req = await srv.request;
    assert.match(req, /^POST \/v1\/completions HTTP\/1\.1\r\n/);
    assert.match(req, /\r\nContent-Length: 15\r\n/, 'the length in bytes, not characters');
    assert.match(req, /\r\nConnection: close\r\n/);
    assert.ok(req.endsWith('\r\n\r\n{"prompt":"é"}'.replace('é', Buffer.from('é').toString('latin1'))));
    assert.equal(seen.ended, true, 'ended by the last chunk, without waiting for the server to close');
    assert.equal(seen.payload, EVENTS.join(''));
    assert.equal(seen.head?.status, 200);
  });

  it('reads a body by its length, and one that ends with the connection', async () => {
    const json = '{"error":{"message":"bad","type":"invalid_request_error"}}';
    const a = await serverAnswering([Buffer.from(`HTTP/1.1 400 Bad Request\r\nContent-Length: ${json.length}\r\n\r\n${json.slice(0, 9)}`), Buffer.from(json.slice(9))], { close: false });
    const byLength = await post(a.port, '{}');
    a.close();
    assert.deepEqual([byLength.ended, byLength.head?.status, byLength.payload], [true, 400, json]);
    const b = await serverAnswering([Buffer.from('HTTP/1.1 200 OK\r\n\r\nuntil'), Buffer.from(' the end')]);
    const byClose = await post(b.port, '{}');
    b.close();
    assert.deepEqual([byClose.ended, byClose.payload], [true, 'until the end']);
  });

  it('reports a chunked answer cut short, and a connection refused, as broken', async () => {
    const wire = Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'), chunkedOf(EVENTS)]);
    const srv = await serverAnswering([wire.subarray(0, 120)]);
    const cut = await post(srv.port, '{}');
    srv.close();
    assert.equal(cut.ended, false);
    assert.equal(cut.broken, 'connection closed');
    assert.ok(cut.payload.length > 0 && EVENTS.join('').startsWith(cut.payload));
    const gone = await serverAnswering([]);
    gone.close();
    const refused = await post(gone.port, '{}');
    assert.equal(refused.broken, 'ECONNREFUSED');
  });

  it("a node's tunnel that refuses the stream at once (it is going away) is a failure before the first byte, not a throw", async () => {
    const lease = {
      connect: () => {
        throw new Error('the tunnel is closing');
      },
    } as unknown as Lease;
    const seen = await post(0, '{}', openUpstream(lease, undefined, 'node', 0));
    assert.deepEqual([seen.ended, seen.broken, seen.head], [false, 'the tunnel is closing', undefined]);
  });
});
