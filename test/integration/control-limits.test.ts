import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { MAX_BAD_LINE_ANSWERS, type NodeToHub } from '../../src/shared/protocol.js';
import { parseNodeMessage } from '../../src/shared/protocol-validate.js';
import { acceptStream, ControlChannel, openStream } from '../../src/main/core/tunnel/channel.js';
import type { YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import { rawFrame, sessionPair } from '../helpers/yamux.js';
import { until } from '../helpers/proc.js';

/**
 * A node cannot make the hub hold without bound, or act on a line after a fatal one: the control channel's
 * send queue is bounded, junk is answered a hundred times and a flood ends the channel, and the yamux session
 * dispatches nothing after a frame that killed it. Over a real session pair (in memory).
 */
async function controlPair(limits: { maxQueuedBytes?: number; maxBadLinesPerMinute?: number } = {}) {
  const pair = await sessionPair('memory', { streamWindow: 256 * 1024 });
  const accepted = once(pair.server, 'stream') as Promise<[YamuxStream]>;
  const nodeEnd = openStream(pair.client, { kind: 'control' });
  nodeEnd.on('error', () => undefined); // reset when the hub cuts it off
  const [hubStream] = await accepted;
  await acceptStream(hubStream);
  const hub = new ControlChannel<NodeToHub, object>(hubStream, parseNodeMessage, limits);
  return { pair, hub, nodeEnd };
}

describe('control channel limits', () => {
  it('a peer that never reads its control stream is cut off once the queue passes the limit (tunnel_overload)', async () => {
    const { pair, hub, nodeEnd } = await controlPair({ maxQueuedBytes: 1024 * 1024 });
    nodeEnd.pause(); // the node reads nothing
    const closed = once(hub, 'close') as Promise<[Error]>;
    let sent = 0;
    const big = 'x'.repeat(4096);
    while (!hub.closed && sent < 10_000) {
      hub.send({ type: 'error', code: 'noise', message: big });
      sent++;
    }
    const [err] = await closed;
    assert.ok(isRelayError(err, 'TUNNEL_OVERLOAD'), String(err));
    // The stream window (256 KiB) plus the queue (1 MiB), in 4 KiB messages: never all 10,000 of them.
    assert.ok(sent < 400, `${sent} messages were queued before the cut`);
    assert.equal(hubStreamGone(hub), true);
    await pair.close();
  });

  it('junk lines are answered, the first hundred of them; the channel carries on', async () => {
    const { pair, hub, nodeEnd } = await controlPair();
    const answers: string[] = [];
    nodeEnd.setEncoding('utf8');
    nodeEnd.on('data', (c: string) => answers.push(...c.split('\n').filter(Boolean)));
    const messages: NodeToHub[] = [];
    hub.on('message', (m: NodeToHub) => messages.push(m));
    nodeEnd.write(`${'not json\n'.repeat(150)}${JSON.stringify({ type: 'availability', availability: 'busy', reason: null })}\n`);
    await until(
      () => messages.length,
      (n) => n === 1,
    );
    await until(
      () => answers.length,
      (n) => n >= MAX_BAD_LINE_ANSWERS,
    );
    assert.equal(answers.length, MAX_BAD_LINE_ANSWERS, 'answered a hundred times, then quiet');
    assert.match(answers[0]!, /"code":"bad_json"/);
    assert.equal(hub.closed, null);
    await pair.close();
  });

  it('a flood of junk ends the channel (tunnel_protocol), and the line after the fatal one is not dispatched', async () => {
    const { pair, hub, nodeEnd } = await controlPair({ maxBadLinesPerMinute: 300 });
    const messages: NodeToHub[] = [];
    hub.on('message', (m: NodeToHub) => messages.push(m));
    const closed = once(hub, 'close') as Promise<[Error]>;
    // One write: 301 junk lines, then a well-formed message that must not be acted on.
    nodeEnd.write(`${'not json\n'.repeat(301)}${JSON.stringify({ type: 'availability', availability: 'paused', reason: null })}\n`);
    const [err] = await closed;
    assert.ok(isRelayError(err, 'TUNNEL_PROTOCOL') && /over 300 malformed/.test(err.message), String(err));
    assert.deepEqual(messages, []);
    await pair.close();
  });

  it('a few junk lines are answered and the channel carries on', async () => {
    const { pair, hub, nodeEnd } = await controlPair();
    const messages: NodeToHub[] = [];
    hub.on('message', (m: NodeToHub) => messages.push(m));
    nodeEnd.write(`{"type":"nope"}\n{"type":"availability"}\n${JSON.stringify({ type: 'availability', availability: 'busy', reason: null })}\n`);
    await until(
      () => messages.length,
      (n) => n === 1,
    );
    assert.equal(hub.closed, null);
    assert.equal(messages[0]!.type, 'availability');
    await pair.close();
  });

  it('the yamux session dispatches nothing after the frame that killed it', async () => {
    const pair = await sessionPair('memory');
    const streams: unknown[] = [];
    pair.server.on('stream', (s: YamuxStream) => streams.push(s));
    const closed = once(pair.server, 'close') as Promise<[Error]>;
    // A SYN with the server's own parity (fatal), then a well-formed SYN from the client's side, in one write.
    pair.transports[0].write(Buffer.concat([rawFrame(1, 1, 2, 0), rawFrame(1, 1, 1001, 0)]));
    const [err] = await closed;
    assert.ok(isRelayError(err, 'TUNNEL_PROTOCOL'), String(err));
    assert.equal(streams.length, 0);
    await pair.close();
  });
});

function hubStreamGone(c: ControlChannel<NodeToHub, object>): boolean {
  return c.stream.destroyed;
}
