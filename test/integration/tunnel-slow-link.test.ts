import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, describe, it } from 'node:test';
import type { YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import type { LinkShape } from '../helpers/shaped-link.js';
import { pattern, sessionPair, sha, type Pair } from '../helpers/yamux.js';

/**
 * The tunnel on a slow household link (user-space shaping: a rate, a delay, a bottleneck queue; the sockets' own
 * buffers fill behind it as on a real link). Byte counts are the oracle, not times: how much of a push was still
 * on its way when a later frame was sent, and whether a ping's answer behind it counts.
 */
const WIFI: LinkShape = { mbitPerSec: 16, delayMs: 5, queueBytes: 256 * 1024 };
const MiB = 1024 * 1024;

type Through = Pair;

/** Two tunnel sessions (WebSocket, 8 MiB stream windows as relay's) whose bytes cross `shape`. */
const sessionsThrough = (shape: LinkShape): Promise<Through> => sessionPair('ws', { streamWindow: 8 * MiB, priorityLevels: 4 }, undefined, shape);

/** Start a bulk stream (priority 3, as a weight push) of `bytes` from client to server; the server reads it all. */
function bulk(t: Through, bytes: number, paced: boolean): { sent: YamuxStream; received: Promise<YamuxStream> } {
  const received = new Promise<YamuxStream>((resolve) =>
    t.server.once('stream', (s: YamuxStream) => {
      s.on('error', () => undefined);
      s.resume();
      resolve(s);
    }),
  );
  const sent = t.client.open(3);
  sent.paced = paced;
  sent.on('error', () => undefined);
  const data = pattern(bytes);
  void (async () => {
    for (let o = 0; o < bytes && !sent.destroyed; o += 256 * 1024) {
      if (!sent.write(data.subarray(o, o + 256 * 1024))) await once(sent, 'drain').catch(() => undefined);
    }
  })();
  return { sent, received };
}

/**
 * Once 3 MiB of a push have arrived, a small message goes out on a priority-1 stream (as an http request or an rpc
 * call would): the push bytes that arrived between its sending and its arrival are the queue it waited behind.
 */
async function bytesAheadOfMessage(paced: boolean): Promise<number> {
  const t = await sessionsThrough(WIFI);
  try {
    const { received } = bulk(t, 16 * MiB, paced);
    const rx = await received;
    while (rx.bytesRead < 3 * MiB) await once(rx, 'data');
    const arrived = new Promise<number>((resolve) =>
      t.server.once('stream', (s: YamuxStream) => {
        s.on('error', () => undefined);
        s.once('data', () => resolve(rx.bytesRead));
      }),
    );
    const msg = t.client.open(1);
    msg.on('error', () => undefined);
    const arrivedBefore = rx.bytesRead;
    msg.write('GET /v1/models\n');
    const at = await arrived;
    // Paced, the message must have overtaken the push (it was still arriving); unpaced it may wait behind all of
    // it, which is the fault measured (how much of the push the writer had handed over by then is a race).
    if (paced) assert.ok(at < 16 * MiB, 'the push was still arriving when the message did');
    return at - arrivedBefore;
  } finally {
    await t.close();
  }
}

describe('the tunnel on a 16 Mbit/s link', { timeout: 120_000 }, () => {
  let unpaced = 0;
  it('without pacing, a push keeps megabytes ahead of every later frame (the fault: seconds of queue)', async () => {
    unpaced = await bytesAheadOfMessage(false);
    console.log(`# unpaced: ${(unpaced / MiB).toFixed(2)} MiB ahead (${((unpaced * 8) / 16e6).toFixed(1)} s at 16 Mbit/s)`);
    assert.ok(unpaced > 2 * MiB, `${unpaced} bytes ahead`);
  });

  it('a paced push keeps a fraction of a second ahead of an http request', async () => {
    const ahead = await bytesAheadOfMessage(true);
    console.log(`# paced: ${(ahead / MiB).toFixed(2)} MiB ahead (${((ahead * 8) / 16e6).toFixed(2)} s at 16 Mbit/s)`);
    // The pacer's floor (512 KiB) plus a grant step and a frame in the sender's queue.
    assert.ok(ahead <= 1.25 * MiB, `${ahead} bytes ahead`);
    assert.ok(ahead < unpaced / 4, 'a quarter of the unpaced queue at most');
  });

  it('on a 100 Mbit/s link a paced push arrives whole: its cap is a measured rate, its frames whole bytes', async () => {
    const t = await sessionsThrough({ mbitPerSec: 100, delayMs: 0.5, queueBytes: MiB });
    try {
      const bytes = 24 * MiB;
      const got = new Promise<Buffer>((resolve) =>
        t.server.once('stream', (s: YamuxStream) => {
          const parts: Buffer[] = [];
          s.on('error', () => undefined);
          s.on('data', (c: Buffer) => parts.push(c));
          s.on('end', () => resolve(Buffer.concat(parts)));
        }),
      );
      const st = t.client.open(3);
      st.paced = true;
      st.on('error', () => undefined); // the session closes with the stream still half-open
      const data = pattern(bytes);
      for (let o = 0; o < bytes; o += 256 * 1024) if (!st.write(data.subarray(o, o + 256 * 1024))) await once(st, 'drain');
      st.end();
      assert.equal(sha(await got), sha(data), 'every byte, in order');
    } finally {
      await t.close();
    }
  });

  it('three pushes at once, one of them reset midway: the other two arrive whole (each keeps room of its own)', async () => {
    const t = await sessionsThrough({ mbitPerSec: 100, delayMs: 0.5, queueBytes: 256 * 1024 });
    try {
      // Odd sizes: the streams stop short of a grant step at different points.
      const sizes = [5 * MiB + 12_345, 3 * MiB + 77_777, 4 * MiB + 1];
      const received = new Map<number, Promise<Buffer>>();
      let n = 0;
      t.server.on('stream', (s: YamuxStream) => {
        const parts: Buffer[] = [];
        s.on('error', () => undefined);
        received.set(n++, new Promise((resolve) => s.on('data', (c: Buffer) => parts.push(c)).on('end', () => resolve(Buffer.concat(parts)))));
      });
      const data = sizes.map((size, i) => pattern(size, i + 7));
      const streams = data.map(() => {
        const st = t.client.open(3);
        st.paced = true;
        st.on('error', () => undefined);
        return st;
      });
      const writes = streams.map(async (st, i) => {
        const d = data[i]!;
        for (let o = 0; o < d.byteLength && !st.destroyed; o += 100_000) {
          if (i === 1 && o >= MiB) {
            st.destroy(); // reset with its bytes in flight: they never come back as window
            return;
          }
          if (!st.write(d.subarray(o, o + 100_000))) await once(st, 'drain').catch(() => undefined);
        }
        st.end();
      });
      await Promise.all(writes);
      while (received.size < 3) await new Promise((r) => setImmediate(r));
      assert.equal(sha(await received.get(0)!), sha(data[0]!));
      assert.equal(sha(await received.get(2)!), sha(data[2]!));
    } finally {
      await t.close();
    }
  });

  const open: Through[] = [];
  after(async () => {
    for (const t of open) await t.close();
  });

  it("a ping answered behind seconds of another's bytes is an answer; a silent peer is found in quietMs", async () => {
    const t = await sessionsThrough(WIFI);
    open.push(t);
    const { received } = bulk(t, 64 * MiB, false);
    const rx = await received;
    while (rx.bytesRead < 2 * MiB) await once(rx, 'data');
    // 8 MiB are on their way: the ping waits ~4 s behind them, while the peer's window updates keep coming back.
    const rtt = await t.client.ping(1000, 20_000);
    console.log(`# a ping behind the push: answered in ${Math.round(rtt)} ms`);
    assert.ok(rtt > 1000, 'the answer took longer than the quiet limit: only the bytes heard meanwhile kept it alive');
    // The peer stops (a laptop's lid closed): nothing more comes back, and the next ping fails on its quiet limit.
    t.transports[1].pause();
    await assert.rejects(t.client.ping(1000, 20_000), /did not answer a ping within 1000 ms$/);
  });
});
