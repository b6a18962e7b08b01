import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isRelayError } from '../../src/shared/errors.js';
import type { YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import { echo, pattern, readAll, sessionPair, sha, writeAll, type TransportKind } from '../helpers/yamux.js';

const KINDS: TransportKind[] = ['memory', 'ws'];

async function roundTrip(opener: import('../../src/main/core/tunnel/yamux/session.js').Session, data: Buffer): Promise<Buffer> {
  const st = opener.open();
  const [got] = await Promise.all([readAll(st), writeAll(st, data)]);
  return got;
}

async function until(cond: () => boolean, limitMs = 5000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cond(), 'condition not reached');
}

describe('yamux session', { timeout: 120_000 }, () => {
  for (const kind of KINDS) {
    for (const dir of ['client→server', 'server→client'] as const) {
      it(`[${kind}, ${dir}] echoes streams of every size intact, FIN ends both halves, nothing is kept`, async () => {
        const p = await sessionPair(kind);
        const [opener, acceptor] = dir === 'client→server' ? [p.client, p.server] : [p.server, p.client];
        echo(acceptor);
        for (const n of [0, 1, 12, 4096, 256 * 1024, 256 * 1024 + 1, 3 * 1024 * 1024 + 7]) {
          const data = pattern(n, n + 1);
          assert.equal(sha(await roundTrip(opener, data)), sha(data), `${n} bytes`);
        }
        await until(() => opener.streamCount === 0 && acceptor.streamCount === 0);
        await p.close();
      });
    }
  }

  it('delivers every payload intact however the byte stream is cut (property, 200 runs)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 1, max: 300 }), { minLength: 1, maxLength: 20 }),
        fc.array(fc.integer({ min: 0, max: 70_000 }), { minLength: 1, maxLength: 6 }),
        async (cuts, sizes) => {
          let k = 0;
          const split = (n: number): number[] => {
            const out: number[] = [];
            for (let left = n; left > 0;) {
              const c = Math.min(left, cuts[k++ % cuts.length]!);
              out.push(c);
              left -= c;
            }
            return out;
          };
          const p = await sessionPair('memory', {}, split);
          echo(p.server);
          const results = await Promise.all(sizes.map((n, i) => roundTrip(p.client, pattern(n, i + 7))));
          results.forEach((r, i) => assert.equal(sha(r), sha(pattern(sizes[i]!, i + 7))));
          await p.close();
        },
      ),
      { numRuns: 200, seed: 424242 },
    );
  });

  it('half-close: the opener ends its side and still reads everything the acceptor sends after', async () => {
    const p = await sessionPair('memory');
    p.server.on('stream', async (st: YamuxStream) => {
      const got = await readAll(st); // waits for the opener's FIN
      st.end(Buffer.concat([Buffer.from('got '), Buffer.from(String(got.byteLength))]));
    });
    const st = p.client.open();
    st.end(pattern(100_000));
    assert.equal((await readAll(st)).toString(), 'got 100000');
    await p.close();
  });

  it("destroy() resets: the peer's stream fails with STREAM_RESET, the session lives on", async () => {
    const p = await sessionPair('memory');
    const accepted = once(p.server, 'stream') as Promise<[YamuxStream]>;
    const st = p.client.open();
    st.write('hello');
    const [remote] = await accepted;
    const err = once(remote, 'error');
    st.destroy();
    const [e] = await err;
    assert.ok(isRelayError(e, 'STREAM_RESET'));
    echo(p.server);
    assert.equal((await roundTrip(p.client, Buffer.from('still fine'))).toString(), 'still fine');
    await until(() => p.client.streamCount === 0 && p.server.streamCount === 0);
    await p.close();
  });

  it('GoAway: no new streams either way, existing ones finish', async () => {
    const p = await sessionPair('memory');
    const accepted = once(p.server, 'stream') as Promise<[YamuxStream]>;
    const st = p.client.open();
    st.write('a');
    const [remote] = await accepted;
    const goaway = once(p.client, 'goaway');
    p.server.goAway();
    await goaway;
    assert.throws(
      () => p.client.open(),
      (e: unknown) => isRelayError(e, 'SESSION_CLOSED') && /going away/.test((e as Error).message),
    );
    assert.throws(
      () => p.server.open(),
      (e: unknown) => isRelayError(e, 'SESSION_CLOSED'),
    );
    remote.end('bye');
    st.end();
    assert.equal((await readAll(st)).toString(), 'bye');
    await p.close();
  });

  it('keepalive: a peer that stops answering pings closes the session with KEEPALIVE_TIMEOUT', async () => {
    const { duplexPair } = await import('../../src/main/core/tunnel/transport.js');
    const { Session } = await import('../../src/main/core/tunnel/yamux/session.js');
    const [a, b] = duplexPair();
    b.on('data', () => undefined); // a silent peer: reads, never answers
    const hold = setTimeout(() => undefined, 10_000); // the session's timers are unref'd by design
    const s = new Session(a, { client: true, keepAliveIntervalMs: 30, keepAliveTimeoutMs: 60 });
    const st = s.open();
    st.on('error', () => undefined);
    const [err] = (await once(s, 'close')) as [Error];
    clearTimeout(hold);
    assert.ok(isRelayError(err, 'KEEPALIVE_TIMEOUT'), String(err));
    assert.equal(st.destroyed, true);
  });

  for (const kind of KINDS) {
    it(`[${kind}] transport death reaches every stream on both sides`, async () => {
      const p = await sessionPair(kind);
      const remotes: YamuxStream[] = [];
      p.server.on('stream', (s: YamuxStream) => remotes.push(s));
      const locals = Array.from({ length: 5 }, () => p.client.open());
      for (const l of locals) l.write('x');
      await until(() => remotes.length === 5);
      const errors = [...locals, ...remotes].map((s) => once(s, 'error').then(([e]) => e as Error));
      p.transports[0].destroy();
      for (const e of await Promise.all(errors)) assert.ok(isRelayError(e, 'SESSION_CLOSED'), String(e));
      assert.equal(p.client.closed && p.server.closed, true);
      await p.close();
    });
  }

  it('1000 concurrent streams, then 10,000 sequential ones, in one session: all intact, nothing leaked', async () => {
    const p = await sessionPair('memory');
    echo(p.server);
    const all = await Promise.all(Array.from({ length: 1000 }, (_, i) => roundTrip(p.client, pattern(1024, i + 1))));
    all.forEach((b, i) => assert.equal(sha(b), sha(pattern(1024, i + 1))));
    for (let i = 0; i < 10_000; i++) {
      const got = await roundTrip(p.client, Buffer.from(`#${i}`));
      if (got.toString() !== `#${i}`) assert.fail(`stream ${i}: ${got.toString()}`);
    }
    await until(() => p.client.streamCount === 0 && p.server.streamCount === 0);
    assert.equal(p.client.stats.streamsOpened, 11_000);
    assert.equal(p.server.stats.streamsAccepted, 11_000);
    await p.close();
  });

  it('a slow reader stalls only its own sender, and its buffer stays within the stream window', async () => {
    const window = 1024 * 1024;
    const p = await sessionPair('ws', { streamWindow: window });
    const slow: YamuxStream[] = [];
    p.server.on('stream', (s: YamuxStream) => {
      if (slow.length === 0) {
        slow.push(s); // never read (paused) until the end
        s.pause();
      } else {
        s.pipe(s);
      }
    });
    const stuck = p.client.open();
    const big = pattern(20 * 1024 * 1024, 3);
    const stuckDone = writeAll(stuck, big);
    await until(() => slow.length === 1);
    // Another stream moves 16 MB while the first is stalled.
    const other = pattern(16 * 1024 * 1024, 9);
    assert.equal(sha(await roundTrip(p.client, other)), sha(other));
    // The stalled stream: the receiver holds at most a window, the sender has not got further than that.
    const s = slow[0]!;
    assert.ok(s.readableLength <= window, `buffered ${s.readableLength}`);
    assert.ok(stuck.bytesWritten <= window + 256 * 1024, `sent ${stuck.bytesWritten}`);
    // Resume: everything arrives.
    const got = readAll(s);
    s.resume();
    await stuckDone;
    assert.equal(sha(await got), sha(big));
    // Our half of the stalled stream is still open: closing the session fails it, as it should.
    stuck.on('error', () => undefined);
    s.on('error', () => undefined);
    await p.close();
  });
});
