import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, renameSync, rmSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import type { SavedSlot } from '../../../../shared/protocol.js';
import type { NodeConn } from '../../pool/conn.js';
import type { Duplex } from 'node:stream';
import { slotStateBytes } from '../../llama/slot-state.js';
import type { SlotLayout } from './slot-keep.js';
import type { SlotTokens } from '../../llama/slot-state.js';

/**
 * A node replica's kept conversations crossing the tunnel (`slot` streams, node/work/slots.ts): fetched into the hub's
 * slot store when the replica stops, sent into a new node replica's slot when it starts. Every byte is counted and
 * hashed against what the sender said; a short, damaged or late transfer throws, and the caller starts cold.
 */

/** A whole slot state crossing the tunnel: its own deadline (a GB at a household link's pace is tens of seconds). */
export const SLOT_CARRY_TIMEOUT_MS = 60_000;

/**
 * How long an answer that moved to a running placement waits for its stopped placement's state to arrive before it
 * goes on without it (evaluating its history again): the save, the process's end and the fetch, on a LAN. Reading it in
 * once here is bounded apart: a local restore by llama-server, a node's by SLOT_CARRY_TIMEOUT_MS.
 */
export const TAKE_IN_WAIT_MS = 3000;

/** How long a new replica waits for a stopped one's state on its way before it starts cold. */
export const START_RESTORE_WAIT_MS = 10_000;

/** The stop-replica reply's `slots`, checked (a field an older or odd node sends otherwise is ignored). */
export function savedSlots(v: unknown): SavedSlot[] {
  if (!Array.isArray(v)) return [];
  return v.filter(
    (s): s is SavedSlot =>
      typeof s === 'object' &&
      s !== null &&
      Number.isInteger((s as SavedSlot).slot) &&
      (s as SavedSlot).slot >= 0 &&
      Number.isSafeInteger((s as SavedSlot).bytes) &&
      (s as SavedSlot).bytes > 0 &&
      /^[0-9a-f]{64}$/.test(String((s as SavedSlot).sha256)),
  );
}

/**
 * Why the states a node lists cannot be fetched, or null (pure): each within the budget and within what a slot of
 * the model's context can hold (slot-state.ts), all together within the budget, one per slot of the replica. A
 * node's word is all these sizes are: they are checked before a byte is fetched, and the fetch stops at them.
 */
export function slotsTooLarge(saved: readonly SavedSlot[], layout: SlotLayout, budgetBytes: number): string | null {
  const most = layout.bytesPerToken != null ? slotStateBytes(layout.ctx, layout.bytesPerToken, layout.stateBytes) : Infinity;
  let sum = 0;
  const seen = new Set<number>();
  for (const s of saved) {
    if (s.slot >= layout.slots || seen.has(s.slot)) return `slot ${s.slot} is not one of the replica's ${layout.slots}`;
    seen.add(s.slot);
    if (s.bytes > budgetBytes) return `slot ${s.slot}'s ${s.bytes} bytes are over RELAY_SLOT_KEEP_MB`;
    if (s.bytes > most) return `slot ${s.slot}'s ${s.bytes} bytes are more than a slot of ${layout.ctx} tokens can hold (${most})`;
    sum += s.bytes;
  }
  return sum > budgetBytes ? `their ${sum} bytes are over RELAY_SLOT_KEEP_MB` : null;
}

/** Fetch slot `s` that node `conn` kept of `replica` into `path`, within `timeoutMs`. */
export async function fetchSlot(conn: NodeConn, replica: string, s: SavedSlot, path: string, timeoutMs = SLOT_CARRY_TIMEOUT_MS): Promise<void> {
  const st = conn.open({ kind: 'slot', op: 'get', replica, slot: s.slot });
  st.on('error', () => undefined); // its failure is the fetch's (below); the session may reset it later too
  const timer = setTimeout(() => st.destroy(new Error('the slot state did not arrive in time')), Math.max(1, timeoutMs));
  try {
    const { line, rest } = await firstLine(st);
    const head = JSON.parse(line) as { ok?: boolean; bytes?: number; sha256?: string; message?: string };
    if (!head.ok) throw new Error(head.message ?? 'the node kept no such slot');
    const hash = createHash('sha256');
    let got = 0;
    const part = `${path}.part`; // under its name only once whole and checked
    const out = createWriteStream(part, { mode: 0o600 });
    const count = async function* (): AsyncGenerator<Buffer> {
      if (rest.byteLength > 0) yield tally(rest);
      for await (const b of st) yield tally(b as Buffer);
    };
    const tally = (b: Buffer): Buffer => {
      got += b.byteLength;
      if (got > s.bytes) throw new Error(`the node sent more than the ${s.bytes} bytes it listed`);
      hash.update(b);
      return b;
    };
    await pipeline(count(), out);
    if (got !== s.bytes || hash.digest('hex') !== s.sha256) throw new Error(`the slot state arrived damaged (${got} of ${s.bytes} bytes, or another sha256)`);
    renameSync(part, path);
  } catch (err) {
    rmSync(`${path}.part`, { force: true });
    throw err;
  } finally {
    clearTimeout(timer);
    st.destroy();
  }
}

/** Send the state at `path` (checked to hash to `sha256` just before) into slot `slot` of node `conn`'s running `replica`; resolves once it was read back. */
export async function putSlot(conn: NodeConn, replica: string, slot: number, path: string, size: number, sha256: string): Promise<void> {
  const st = conn.open({ kind: 'slot', op: 'put', replica, slot, size, sha256 });
  st.on('error', () => undefined);
  const timer = setTimeout(() => st.destroy(new Error('the slot state was not restored in time')), SLOT_CARRY_TIMEOUT_MS);
  try {
    // The node may refuse before it has read a byte (the replica is gone): its answer ends the send.
    const answer = firstLine(st).then((a) => {
      const r = JSON.parse(a.line) as { ok?: boolean; message?: string };
      if (!r.ok) throw new Error(r.message ?? 'the node could not restore the slot');
    });
    answer.catch(() => undefined);
    await Promise.race([pipeline(createReadStream(path), st, { end: false }).then(() => answer), answer]);
    await answer;
  } finally {
    clearTimeout(timer);
    st.destroy();
  }
}

/** The stream's first line (a JSON answer) and whatever came after it in the same read. */
function firstLine(st: Duplex): Promise<{ line: string; rest: Buffer }> {
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

/** The most a node's answer of idle slots' tokens may take (token ids of a few long contexts). */
const MAX_TOKENS_ANSWER = 64 * 1024 * 1024;

/** The token lists of `replica`'s idle slots on node `conn` (an answer just yielded one: its record), within `timeoutMs`. */
export async function fetchIdleSlotTokens(conn: NodeConn, replica: string, busy: number, timeoutMs = SLOT_CARRY_TIMEOUT_MS): Promise<SlotTokens[]> {
  const st = conn.open({ kind: 'slot', op: 'tokens', replica, busy });
  st.on('error', () => undefined);
  const timer = setTimeout(() => st.destroy(new Error("the slots' tokens did not arrive in time")), Math.max(1, timeoutMs));
  try {
    const parts: Buffer[] = [];
    let got = 0;
    for await (const b of st) {
      got += (b as Buffer).byteLength;
      if (got > MAX_TOKENS_ANSWER) throw new Error('the node sent more than a record can be');
      parts.push(b as Buffer);
    }
    const r = JSON.parse(Buffer.concat(parts).toString('utf8')) as { ok?: boolean; message?: string; slots?: unknown };
    if (!r.ok) throw new Error(r.message ?? 'the node could not read its slots');
    // The node's word: only well-formed lists are kept (what they are worth is decided where they are used: exact.ts).
    return (Array.isArray(r.slots) ? r.slots : []).filter(
      (x): x is SlotTokens =>
        typeof x === 'object' && x !== null && Number.isInteger((x as SlotTokens).slot) && Array.isArray((x as SlotTokens).tokens) && (x as SlotTokens).tokens.every(Number.isInteger),
    );
  } finally {
    clearTimeout(timer);
    st.destroy();
  }
}
