import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, rmSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import type { SavedSlot } from '../../../shared/protocol.js';
import type { NodeConn } from '../pool/conn.js';
import type { YamuxStream } from '../tunnel/yamux/session.js';

/**
 * A node replica's kept conversations crossing the tunnel (`slot` streams, node/slots.ts): fetched into the hub's
 * slot store when the replica stops, sent into a new node replica's slot when it starts. Every byte is counted and
 * hashed against what the sender said; a short, damaged or late transfer throws, and the caller starts cold.
 */

/** A whole slot state crossing the tunnel: its own deadline (a GB at a household link's pace is tens of seconds). */
export const SLOT_CARRY_TIMEOUT_MS = 60_000;

/** The stop-replica reply's `slots`, checked (a field an older or odd node sends otherwise is ignored). */
export function savedSlots(v: unknown): SavedSlot[] {
  if (!Array.isArray(v)) return [];
  return v.filter(
    (s): s is SavedSlot =>
      typeof s === 'object' && s !== null && Number.isInteger((s as SavedSlot).slot) && Number.isInteger((s as SavedSlot).bytes) && /^[0-9a-f]{64}$/.test(String((s as SavedSlot).sha256)),
  );
}

/** Fetch slot `s` that node `conn` kept of `replica` into `path`. */
export async function fetchSlot(conn: NodeConn, replica: string, s: SavedSlot, path: string): Promise<void> {
  const st = conn.open({ kind: 'slot', op: 'get', replica, slot: s.slot });
  const timer = setTimeout(() => st.destroy(new Error('the slot state did not arrive in time')), SLOT_CARRY_TIMEOUT_MS);
  try {
    const { line, rest } = await firstLine(st);
    const head = JSON.parse(line) as { ok?: boolean; bytes?: number; sha256?: string; message?: string };
    if (!head.ok) throw new Error(head.message ?? 'the node kept no such slot');
    const hash = createHash('sha256');
    let got = 0;
    const out = createWriteStream(path, { mode: 0o600 });
    const count = async function* (): AsyncGenerator<Buffer> {
      if (rest.byteLength > 0) yield tally(rest);
      for await (const b of st) yield tally(b as Buffer);
    };
    const tally = (b: Buffer): Buffer => {
      got += b.byteLength;
      hash.update(b);
      return b;
    };
    await pipeline(count(), out);
    if (got !== s.bytes || hash.digest('hex') !== s.sha256) throw new Error(`the slot state arrived damaged (${got} of ${s.bytes} bytes, or another sha256)`);
  } catch (err) {
    rmSync(path, { force: true });
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** Send the state at `path` into slot `slot` of node `conn`'s running `replica`; resolves once it was read back. */
export async function putSlot(conn: NodeConn, replica: string, slot: number, path: string, size: number): Promise<void> {
  const sha256 = await sha256Of(path);
  const st = conn.open({ kind: 'slot', op: 'put', replica, slot, size, sha256 });
  const timer = setTimeout(() => st.destroy(new Error('the slot state was not restored in time')), SLOT_CARRY_TIMEOUT_MS);
  try {
    const answer = firstLine(st);
    await pipeline(createReadStream(path), st, { end: false });
    const { line } = await answer;
    const r = JSON.parse(line) as { ok?: boolean; message?: string };
    if (!r.ok) throw new Error(r.message ?? 'the node could not restore the slot');
  } finally {
    clearTimeout(timer);
    st.destroy();
  }
}

export async function sha256Of(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const b of createReadStream(path)) hash.update(b as Buffer);
  return hash.digest('hex');
}

/** The stream's first line (a JSON answer) and whatever came after it in the same read. */
function firstLine(st: YamuxStream): Promise<{ line: string; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (b: Buffer): void => {
      buf = Buffer.concat([buf, b]);
      const nl = buf.indexOf(0x0a);
      if (nl < 0) {
        if (buf.byteLength > 4096) done(new Error('no answer line from the node'));
        return;
      }
      st.off('data', onData);
      st.pause();
      cleanup();
      resolve({ line: buf.subarray(0, nl).toString('utf8'), rest: buf.subarray(nl + 1) });
    };
    const done = (err: Error): void => {
      st.off('data', onData);
      cleanup();
      reject(err);
    };
    const onEnd = (): void => done(new Error('the node closed the slot stream without an answer'));
    const cleanup = (): void => {
      st.off('end', onEnd);
      st.off('error', done);
      st.off('close', onEnd);
    };
    st.on('data', onData);
    st.once('end', onEnd);
    st.once('error', done);
    st.once('close', onEnd);
  });
}
