import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { serveEvents } from '../../src/main/core/hub/observe/events.js';

/**
 * The hub's /events stream (serveEvents) against a reader that stops reading: dropped once its unsent backlog
 * passes the cap, so the hub never holds more than ~1 MiB for it; a reader that reads is never dropped. Real
 * sockets on 127.0.0.1; the interval is 2 ms and each event 64 KiB so the kernel's buffers fill in moments.
 */
describe('/events and a stalled reader', { timeout: 60_000 }, () => {
  const CAP = 1024 * 1024;
  const EVENT = 64 * 1024;

  /** One /events server; `dropped` settles when the (one) reader's response closes, with its peak backlog. */
  async function server(): Promise<{ port: number; peak: () => number; dropped: Promise<void>; close: () => void }> {
    let peak = 0;
    let onClose!: () => void;
    const dropped = new Promise<void>((r) => (onClose = r));
    const srv = createServer((req, res: ServerResponse) => {
      res.once('close', onClose);
      let seq = 0;
      serveEvents(
        req,
        res,
        () => {
          peak = Math.max(peak, res.writableLength); // what the hub holds for this reader before each write
          return JSON.stringify({ seq: seq++, pad: 'x'.repeat(EVENT) }); // changes every tick: sent whole
        },
        { intervalMs: 2, maxBacklogBytes: CAP },
      );
    });
    srv.listen(0, '127.0.0.1');
    await once(srv, 'listening');
    return {
      port: (srv.address() as AddressInfo).port,
      peak: () => peak,
      dropped,
      close: () => {
        srv.closeAllConnections();
        srv.close();
      },
    };
  }

  /** A server and one raw client that has asked it for /events. */
  async function reader() {
    const s = await server();
    const sock = connect(s.port, '127.0.0.1');
    await once(sock, 'connect');
    sock.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`);
    return { s, sock };
  }

  it('a reader that never reads is dropped once its backlog passes the cap: the hub holds at most the cap plus one event', async () => {
    const { s, sock } = await reader();
    sock.pause(); // reads nothing, ever
    await s.dropped;
    const peak = s.peak();
    assert.ok(peak <= CAP, `no write once the backlog passed the cap (peak before a write: ${peak})`);
    assert.ok(peak + EVENT > CAP, `dropped because the last write took the backlog past the cap (peak ${peak})`);
    sock.destroy();
    s.close();
  });

  it('a reader that reads is never dropped', async () => {
    const { s, sock } = await reader();
    let events = 0;
    let dropped = false;
    void s.dropped.then(() => (dropped = true));
    let carry = '';
    await new Promise<void>((resolve) => {
      sock.on('data', (c: Buffer) => {
        const text = carry + c.toString('latin1');
        const parts = text.split('\n\n');
        carry = parts.pop()!;
        events += parts.filter((p) => p.includes('data: {')).length;
        if (events >= 200) resolve(); // 200 × 64 KiB: far past what the kernel alone would buffer
      });
    });
    assert.equal(dropped, false);
    assert.ok(s.peak() <= CAP);
    sock.destroy();
    s.close();
  });
});
