import { createHash } from 'node:crypto';
import { sha256File } from '../../models/describe.js';
import { chmodSync, createReadStream, createWriteStream, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { SavedSlot, SlotStreamHeader } from '../../../../shared/protocol.js';
import type { YamuxStream } from '../../tunnel/yamux/session.js';
import { idleSlotTokens, slotStateBytes } from '../../llama/slot-state.js';

/**
 * A node's kept conversations (issue #44, item 3). A replica the hub started with `keepSlotsBytes` saves, when it
 * stops — the hub's stop, the owner's pause, a schedule window, an eviction —, each slot that holds a prompt with
 * llama-server's own `/slots/{id}?action=save`, before its process goes; the stop-replica reply lists them. The hub
 * fetches each over a `slot get` stream (this node forgets it then) and can send one back into a new replica's slot
 * (`slot put`, read back with `action=restore`). Files live in `<home>/slots` (0700, emptied at start: they hold
 * conversations); names are made here, never taken from the hub. What waits for the hub (a fetch that failed, a
 * hub gone) stays within the hub's byte budget, oldest dropped first. Anything that fails means a cold start, never
 * an error for the stop: the save has SAVE_BUDGET_MS in all, so the owner's card is back well inside 30 s.
 */
const SAVE_BUDGET_MS = 10_000;

interface Kept extends SavedSlot {
  readonly file: string;
  /** When it was saved: what the hub has not fetched within KEEP_TTL_MS goes. */
  readonly at: number;
}

/** How long a kept state waits for the hub (one that never asks: restarted, gone) before its file goes. */
const KEEP_TTL_MS = 10 * 60_000;

export class NodeSlots {
  private readonly kept = new Map<string, Kept[]>();

  constructor(private readonly d: { readonly dir: string; readonly log: Logger }) {
    rmSync(d.dir, { recursive: true, force: true });
    mkdirSync(d.dir, { recursive: true, mode: 0o700 });
    chmodSync(d.dir, 0o700);
  }

  /** llama-server's --slot-save-path (it joins names to it as strings: the trailing slash matters). */
  get savePath(): string {
    return `${this.d.dir}/`;
  }

  /**
   * Save what `replica`'s slots hold (its llama-server at `baseUrl`), within `maxBytes` in all — estimated first at
   * `bytesPerToken` a token when the hub gave it, so an oversized state is never written —; what was kept.
   */
  async save(replica: string, baseUrl: string, maxBytes: number, bytesPerToken: number | null = null): Promise<SavedSlot[]> {
    const deadline = Date.now() + SAVE_BUDGET_MS;
    const signal = AbortSignal.timeout(SAVE_BUDGET_MS);
    const kept: Kept[] = [];
    this.expire();
    try {
      const r = await fetch(`${baseUrl}/slots`, { signal });
      // n_prompt_tokens: every token the slot's cache holds (its prompts and what it generated).
      type Slot = { id: number; n_prompt_tokens?: number };
      const slots = ((await r.json()) as Slot[]).filter((s) => (s.n_prompt_tokens ?? 0) > 0);
      const estimate = bytesPerToken === null ? 0 : slots.reduce((n, s) => n + slotStateBytes(s.n_prompt_tokens ?? 0, bytesPerToken), 0);
      if (estimate > maxBytes) throw new Error(`its slots would take about ${estimate} bytes, over ${maxBytes}`);
      let bytes = 0;
      for (const s of slots) {
        const file = `${replica}-${s.id}.bin`;
        const saved = await fetch(`${baseUrl}/slots/${s.id}?action=save`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ filename: file }), signal });
        if (!saved.ok) throw new Error(`slot ${s.id}: ${saved.status} ${await saved.text()}`);
        const size = statSync(join(this.d.dir, file)).size;
        if ((bytes += size) > maxBytes) throw new Error(`its slots take over ${maxBytes} bytes`);
        if (Date.now() > deadline) throw new Error(`saving took over ${SAVE_BUDGET_MS} ms`);
        kept.push({ slot: s.id, file, bytes: size, sha256: await sha256File(join(this.d.dir, file)), at: Date.now() });
      }
    } catch (err) {
      this.d.log.info({ replica, message: (err as Error).message }, 'slots not kept: its conversations start cold elsewhere');
      this.remove(kept);
      this.sweep(replica); // the file a failed or oversized save wrote
      return [];
    }
    if (kept.length === 0) return [];
    this.kept.set(replica, kept);
    // What waits for the hub stays within the same budget, all replicas together: the oldest go first.
    const total = (): number => [...this.kept.values()].flat().reduce((n, k) => n + k.bytes, 0);
    for (const old of [...this.kept.keys()]) if (old !== replica && total() > maxBytes) this.forget(old);
    this.d.log.info({ replica, slots: kept.length, bytes: kept.reduce((n, k) => n + k.bytes, 0) }, 'kept the slots of a stopping replica for the hub');
    return kept.map(({ slot, bytes, sha256 }) => ({ slot, bytes, sha256 }));
  }

  /** Files of `replica` that are not kept (a save cut short): removed once its process is gone. */
  sweep(replica: string): void {
    const keep = new Set((this.kept.get(replica) ?? []).map((k) => k.file));
    for (const f of readdirSync(this.d.dir)) if (f.startsWith(`${replica}-`) && !keep.has(f)) rmSync(join(this.d.dir, f), { force: true });
  }

  /** States the hub never fetched within KEEP_TTL_MS. */
  private expire(): void {
    for (const [replica, ks] of [...this.kept]) if (ks.every((k) => Date.now() - k.at > KEEP_TTL_MS)) this.forget(replica);
  }

  /** What was kept of `replica` (the stop-replica reply, also when the owner's pause stopped it first). */
  list(replica: string): SavedSlot[] {
    this.expire();
    return (this.kept.get(replica) ?? []).map(({ slot, bytes, sha256 }) => ({ slot, bytes, sha256 }));
  }

  /** A `slot` stream from the hub; `baseUrlOf` finds a running replica's llama-server (for a put). */
  async serve(st: YamuxStream, h: SlotStreamHeader, baseUrlOf: (replica: string) => string | undefined): Promise<void> {
    const answer = (line: Record<string, unknown>): void => void st.write(`${JSON.stringify(line)}\n`);
    try {
      if (h.op === 'tokens') {
        const base = baseUrlOf(h.replica);
        if (!base) return void st.end(`${JSON.stringify({ ok: false, message: `replica ${h.replica} is not running here` })}\n`);
        return void st.end(`${JSON.stringify({ ok: true, slots: await idleSlotTokens(base, this.d.dir, `yield-${h.replica}`, h.busy) })}\n`);
      }
      if (h.op === 'get') {
        const k = this.kept.get(h.replica)?.find((x) => x.slot === h.slot);
        if (!k) return void st.end(`${JSON.stringify({ ok: false, message: 'no such kept slot' })}\n`);
        answer({ ok: true, bytes: k.bytes, sha256: k.sha256 });
        await pipeline(createReadStream(join(this.d.dir, k.file)), st);
        this.forgetSlot(h.replica, h.slot);
        return;
      }
      const base = baseUrlOf(h.replica);
      if (!base) return void st.end(`${JSON.stringify({ ok: false, message: `replica ${h.replica} is not running here` })}\n`);
      const file = `in-${h.replica}-${h.slot}.bin`;
      const path = join(this.d.dir, file);
      try {
        const sha = await receive(st, path, h.size);
        if (sha !== h.sha256) throw new Error('the state arrived damaged (another sha256)');
        const r = await fetch(`${base}/slots/${h.slot}?action=restore`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ filename: file }),
          signal: AbortSignal.timeout(120_000),
        });
        if (!r.ok) throw new Error(`restore: ${r.status} ${await r.text()}`);
        st.end(`${JSON.stringify({ ok: true })}\n`);
      } finally {
        rmSync(path, { force: true });
      }
    } catch (err) {
      if (!st.destroyed && !st.writableEnded) st.end(`${JSON.stringify({ ok: false, message: (err as Error).message })}\n`);
    }
  }

  private forgetSlot(replica: string, slot: number): void {
    const left = (this.kept.get(replica) ?? []).filter((k) => {
      if (k.slot !== slot) return true;
      this.remove([k]);
      return false;
    });
    if (left.length > 0) this.kept.set(replica, left);
    else this.kept.delete(replica);
  }

  private forget(replica: string): void {
    this.remove(this.kept.get(replica) ?? []);
    this.kept.delete(replica);
  }

  private remove(files: readonly { file: string }[]): void {
    for (const f of files) rmSync(join(this.d.dir, f.file), { force: true });
  }
}

/** Exactly `size` bytes of `st` into `path` (the stream stays open for the answer); their sha256. */
function receive(st: YamuxStream, path: string, size: number): Promise<string> {
  const out = createWriteStream(path, { mode: 0o600 });
  const hash = createHash('sha256');
  let got = 0;
  return new Promise<string>((resolve, reject) => {
    const fail = (err: Error): void => {
      st.off('data', onData);
      out.destroy();
      reject(err);
    };
    const onData = (b: Buffer): void => {
      const part = b.subarray(0, size - got);
      got += part.byteLength;
      hash.update(part);
      if (!out.write(part)) {
        st.pause();
        out.once('drain', () => st.resume());
      }
      if (got < size) return;
      st.off('data', onData);
      st.pause();
      out.end(() => resolve(hash.digest('hex')));
    };
    st.on('data', onData);
    st.once('end', () => got < size && fail(new Error(`the state ended after ${got} of ${size} bytes`)));
    st.once('error', fail);
    out.once('error', fail);
    if (size === 0) fail(new Error('an empty state'));
    else st.resume();
  });
}
