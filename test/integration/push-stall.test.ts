import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { isRelayError } from '../../src/shared/errors.js';
import { parseHubMessage, parseNodeMessage } from '../../src/shared/protocol-validate.js';
import { PROTOCOL_VERSION, type HubToNode, type NodeToHub } from '../../src/shared/protocol.js';
import { NodeConn } from '../../src/main/core/pool/conn.js';
import { WeightPusher } from '../../src/main/core/pool/push.js';
import { acceptStream, ControlChannel, openStream, replyOk } from '../../src/main/core/tunnel/channel.js';
import type { YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';
import { sessionPair, sha } from '../helpers/yamux.js';

/**
 * A push that stalls while the node still answers pings (its disk stopped taking writes: nothing on the link is
 * wrong) fails with PUSH_STALLED after the stall limit instead of holding its placement "starting" until the
 * load's deadline. The hub's real pusher and NodeConn over a real yamux session; the node's side is a peer
 * that accepts the file stream and never reads it (its window fills, the hub's bytes stop) but answers pings.
 */
describe('a weight push that stalls', { timeout: 60_000 }, () => {
  it('fails with push_stalled after the limit; the node answered every ping meanwhile, its session is up', async () => {
    const pair = await sessionPair('memory', { streamWindow: 256 * 1024 });
    // The node's end: a control channel that answers push-begin, and a file stream nobody reads.
    const nodeControl = new ControlChannel<HubToNode, NodeToHub>(openStream(pair.client, { kind: 'control' }), parseHubMessage);
    nodeControl.on('message', (m: HubToNode) => {
      if (m.type === 'push-begin') nodeControl.send(replyOk(m.id, { offset: 0 }));
    });
    const files: YamuxStream[] = [];
    pair.client.on('stream', (st: YamuxStream) => {
      st.on('error', () => undefined);
      files.push(st); // accepted, never read: a node whose disk write never returns
    });
    const [hubStream] = (await once(pair.server, 'stream')) as [YamuxStream];
    await acceptStream(hubStream);
    const hubControl = new ControlChannel<NodeToHub, HubToNode>(hubStream, parseNodeMessage);
    const conn = new NodeConn('usb-disk', pair.server, hubControl, {
      type: 'hello',
      protocol: PROTOCOL_VERSION,
      node: 'usb-disk',
      llama: 'x',
      devices: [],
      cache: [],
      partials: [],
      replicas: [],
      availability: 'idle',
      reason: null,
    });
    const bytes = Buffer.alloc(8 * 1024 * 1024, 3);
    const path = join(mkdtempSync(join(tmpdir(), 'relay-push-stall-')), 'm.gguf');
    writeFileSync(path, bytes);
    const model = { name: 'm', path, sha256: sha(bytes), size: bytes.length, mtimeMs: 0 } as ModelRecord;
    const pusher = new WeightPusher({ log: pino({ level: 'silent' }), stallMs: 3000 });
    let pings = 0;
    const pinging = setInterval(
      () =>
        void pair.server.ping(1000).then(
          () => pings++,
          () => undefined, // one still out when the pair closes
        ),
      200,
    );
    try {
      const err = await pusher.push(conn, model).then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(isRelayError(err, 'PUSH_STALLED'), String(err));
      assert.match(err.message, /moved no byte for [3-9] s while the node answered pings/);
      assert.ok(pings > 5, `the node answered pings throughout (${pings})`);
      assert.equal(pair.server.closed, false, 'a stalled push is not a dead node: the session stays');
      assert.equal(files.length, 1);
      assert.equal(pusher.pushes.size, 0, 'nothing left in the progress list');
    } finally {
      clearInterval(pinging);
      await pair.close();
    }
  });
});
