import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BulkPacer, GRANT_STEP, MIN_BYTES, START_BYTES, TARGET_MS } from '../../src/main/core/tunnel/yamux/pacer.js';

/**
 * The bulk pacer's arithmetic on a clock of its own: a link of `bytesPerMs`, a sender that keeps the pacer's room
 * full and a peer that returns window every GRANT_STEP it has read.
 */
function runLink(bytesPerMs: number, ms: number, rttMs = 0): { pacer: BulkPacer; delivered: number } {
  let now = 0;
  const p = new BulkPacer(() => now);
  if (rttMs > 0) p.sawRtt(rttMs); // the keep-alive's ping on the idle link
  let queued = 0;
  let read = 0;
  let delivered = 0;
  /** Grants on their way back: [due, bytes]. The link's round trip separates a byte's sending from its grant. */
  const grants: [number, number][] = [];
  for (; now < ms; now++) {
    while (grants.length > 0 && grants[0]![0] <= now) p.returned(grants.shift()![1]);
    const room = p.room();
    if (room > 0) {
      p.sent(room);
      queued += room;
    }
    const n = Math.min(queued, bytesPerMs);
    queued -= n;
    read += n;
    delivered += n;
    while (read >= GRANT_STEP) {
      grants.push([now + rttMs, GRANT_STEP]);
      read -= GRANT_STEP;
    }
  }
  return { pacer: p, delivered };
}

describe('the bulk pacer (yamux/pacer.ts)', () => {
  it('starts with START_BYTES in flight and never lets more out before the peer reads', () => {
    const p = new BulkPacer(() => 0);
    assert.equal(p.room(), START_BYTES);
    p.sent(START_BYTES);
    assert.equal(p.room(), 0);
    p.forget(GRANT_STEP); // a stream that ended: its bytes will never come back
    assert.equal(p.room(), GRANT_STEP);
  });

  for (const [link, bytesPerMs] of [
    ['16 Mbit/s Wi-Fi', 2_000],
    ['100 Mbit/s Ethernet', 12_500],
    ['1 Gbit/s Ethernet', 125_000],
  ] as const) {
    it(`on ${link} the cap settles at TARGET_MS of the link's rate, never under its floor`, () => {
      const cap = runLink(bytesPerMs, 3000).pacer.cap();
      assert.ok(Number.isInteger(cap), `whole bytes: a frame's length is cut from it (${cap})`);
      const want = Math.max(MIN_BYTES, bytesPerMs * TARGET_MS);
      assert.ok(Math.abs(cap - want) <= want * 0.05, `cap ${cap}, want ${want}`);
    });
  }

  it('a slow link is kept to its floor: half a MiB, a quarter second at 16 Mbit/s; a 1 Gbit/s link to more than an 8 MiB window', () => {
    assert.equal(runLink(2_000, 3000).pacer.cap(), MIN_BYTES);
    assert.ok(runLink(125_000, 3000).pacer.cap() > 8 * 1024 * 1024, 'a push on a fast link is never slowed');
  });

  it('a long round trip (200 ms, a node across the internet) does not ratchet the cap down: the link stays full', () => {
    const { pacer, delivered } = runLink(12_500, 6000, 200);
    const want = 12_500 * (TARGET_MS + 200);
    assert.ok(Math.abs(pacer.cap() - want) <= want * 0.1, `cap ${pacer.cap()}, want ${want}`);
    // Without the round trip in the cap it would settle at rate × 100 ms / 200 ms: a third of the link.
    assert.ok(delivered >= 12_500 * 6000 * 0.9, `delivered ${delivered} of ${12_500 * 6000}`);
  });
});
