import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { sha256File } from '../../models/describe.js';
import { slotStateBytes } from '../../llama/slot-state.js';

/** Slots saved for a model's next replica. */
export interface KeptSlots {
  /** The replica was used after all: the saved state is stale, and goes. */
  discard(): void;
}

/**
 * Conversations kept across a keep-alive stop (issue #26, item 2): before an idle host replica stops, each of its
 * slots that holds a prompt is saved with llama-server's `/slots/{id}?action=save` into one folder under the hub's
 * home; the next host replica of the same file and KV layout reads them back (`action=restore`) before it takes a
 * request, so a conversation resumes with its history already evaluated (bench/slot-restore: 0.03–0.15× the cold
 * prompt time on this CPU). One kept state per model, all of them within a byte budget (oldest dropped first);
 * anything that fails (a save, a restore, a file) only means a cold start. The folder is emptied when the hub
 * starts: what the routing knew about those slots is gone with the last process. Each file's sha256 is taken when
 * it is kept and checked before it is read back: a damaged file is a cold start, never a wrong conversation.
 * Node replicas keep theirs the same way: the node saves them as it stops the replica, the hub fetches them here
 * (`adopt`), and a node replica's start sends them back over the tunnel (`restoreWith`; scheduler/slots/slot-carry.ts).
 */

/** The KV layout a state fits: a restore needs the same file, context per slot, slot count and cache type. */
export interface SlotLayout {
  readonly sha256: string;
  readonly ctx: number;
  readonly slots: number;
  readonly cacheType: string;
  /** KV bytes one token takes at that cache type (null: unknown), for the estimate made before anything is written. */
  readonly bytesPerToken?: number | null;
  /** Recurrent state bytes a slot holds whatever its length (hybrid and recurrent models), for the same estimate. */
  readonly stateBytes?: number;
}

/** A kept state read back: the placement it was kept from, and its bytes. */
export interface Restored {
  readonly from: string;
  readonly bytes: number;
}

/** One kept slot: its file in the store, its size and sha256. */
export interface KeptFile {
  readonly slot: number;
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

interface Kept {
  readonly placementId: string;
  /** The node whose replica saved it (null: the hub's own). A node's state is read back on that node only. */
  readonly origin: string | null;
  readonly layout: string;
  readonly files: readonly KeptFile[];
  readonly bytes: number;
  readonly at: number;
}

/** A save or restore of one slot: a KV cache of gigabytes is written or read at disk speed. */
const SLOT_IO_TIMEOUT_MS = 120_000;

const layoutKey = (l: SlotLayout): string => `${l.sha256}:${l.ctx}x${l.slots}:${l.cacheType}`;

export class SlotKeeper {
  private readonly kept = new Map<string, Kept>();
  /** Per model, a stopping node replica's state on its way here: a restore waits for it (see `expect`). */
  private readonly incoming = new Map<string, Promise<void>>();

  constructor(private readonly d: { readonly dir: string; readonly budgetBytes: number; readonly log: Logger; now(): number }) {
    rmSync(d.dir, { recursive: true, force: true });
    if (d.budgetBytes > 0) {
      // The files hold conversations (their token ids and KV): the hub's user alone reads them.
      mkdirSync(d.dir, { recursive: true, mode: 0o700 });
      chmodSync(d.dir, 0o700);
    }
  }

  get enabled(): boolean {
    return this.d.budgetBytes > 0;
  }

  /** llama-server's --slot-save-path (it joins names to it as strings: the trailing slash matters). */
  get savePath(): string {
    return `${this.d.dir}/`;
  }

  get dir(): string {
    return this.d.dir;
  }

  /** Held bytes, all models (tests, /status). */
  get bytes(): number {
    let n = 0;
    for (const k of this.kept.values()) n += k.bytes;
    return n;
  }

  /**
   * Save the slots of `placementId`'s llama-server that hold a prompt; true when they are kept for `model`'s next
   * replica (false: nothing to keep, over the budget, or a save failed — nothing is left on disk then). `onSaved`
   * reads the files once all are written, before they are kept or removed (a stop's record of its answers).
   */
  async save(model: string, placementId: string, layout: SlotLayout, baseUrl: string, onSaved?: (files: readonly KeptFile[]) => Promise<void>): Promise<boolean> {
    if (!this.enabled) return false;
    const files: KeptFile[] = [];
    try {
      const slots = ((await getJson(`${baseUrl}/slots`)) as { id: number; n_prompt_tokens?: number }[]).filter((x) => (x.n_prompt_tokens ?? 0) > 0);
      // What the files would take, before a byte is written.
      const estimate = layout.bytesPerToken != null ? slots.reduce((n, x) => n + slotStateBytes(x.n_prompt_tokens!, layout.bytesPerToken!, layout.stateBytes), 0) : 0;
      if (estimate > this.d.budgetBytes) {
        this.d.log.info({ model, estimate_bytes: estimate, budget_bytes: this.d.budgetBytes }, 'slots larger than RELAY_SLOT_KEEP_MB: not saved');
        return false;
      }
      for (const s of slots) {
        const file = `${placementId}-${s.id}.bin`;
        const r = (await postJson(`${baseUrl}/slots/${s.id}?action=save`, { filename: file })) as { n_written?: number };
        files.push({ slot: s.id, file, bytes: r.n_written ?? 0, sha256: await sha256File(this.path(file)) });
      }
      await onSaved?.(files);
    } catch (err) {
      this.d.log.warn({ model, placement: placementId, message: (err as Error).message }, 'could not save the slots of a stopping replica: its conversations start cold');
      this.remove(files);
      return false;
    }
    return this.adopt(model, placementId, layout, files, null);
  }

  /** Where a kept file lives (a node's fetched state is written here before `adopt`). */
  path(file: string): string {
    return join(this.d.dir, file);
  }

  /**
   * Keep `files` (already in the store: saved here, or fetched from node `origin`) for `model`'s next replica, within
   * the budget.
   */
  adopt(model: string, placementId: string, layout: SlotLayout, files: KeptFile[], origin: string | null): boolean {
    const bytes = files.reduce((n, f) => n + f.bytes, 0);
    if (!this.enabled || files.length === 0 || bytes > this.d.budgetBytes) {
      if (files.length > 0) this.d.log.info({ model, bytes, budget_bytes: this.d.budgetBytes }, 'slots larger than RELAY_SLOT_KEEP_MB: not kept');
      this.remove(files);
      return false;
    }
    this.drop(model);
    this.kept.set(model, { placementId, origin, layout: layoutKey(layout), files, bytes, at: this.d.now() });
    // Within the budget: the oldest states go first.
    for (const [m] of [...this.kept].sort((a, b) => a[1].at - b[1].at)) {
      if (this.bytes <= this.d.budgetBytes || m === model) break;
      this.drop(m);
    }
    this.d.log.info({ model, placement: placementId, slots: files.length, bytes }, 'kept the slots of an idle replica for its next start');
    return true;
  }

  /**
   * Read the state kept for `model` into a new llama-server of the hub's of the same layout; the placement it came
   * from (whose prompts the new one now holds) and its size, or null: none kept, another layout, a node's, or a
   * restore failed (then cold).
   */
  restore(model: string, layout: SlotLayout, baseUrl: string, waitMs?: number, from?: string): Promise<Restored | null> {
    return this.restoreWith(model, layout, null, (f) => postJson(`${baseUrl}/slots/${f.slot}?action=restore`, { filename: f.file }), waitMs, from);
  }

  /**
   * A stopping node replica's state for `model` is on its way (the node saves it, the hub fetches it): the model's
   * next replica, which may be starting already — an answer that moved, a turn that came — waits for it before its
   * restore. `arriving` settles within the stop's and the fetch's own deadlines.
   */
  expect(model: string, arriving: Promise<unknown>): void {
    const settled = arriving.then(
      () => undefined,
      () => undefined,
    );
    this.incoming.set(model, settled);
    void settled.then(() => {
      if (this.incoming.get(model) === settled) this.incoming.delete(model);
    });
  }

  /**
   * `restore` by way of `put` into a llama-server on `target` (a node's name; null: the hub's), a node replica's file
   * sent through the tunnel; each file's hash checked first. A state on its way is waited for (`expect`), at most
   * `waitMs` when given. `from`: only the state that placement kept, and only into this layout (a running placement
   * taking in a moved answer's); another is left for the model's next replica. A state a node saved is read back on
   * that node only: its KV is the node's word (nothing can check it short of evaluating it again), so it never
   * reaches the hub's llama-servers or another node's, where it would answer prompts that node never served.
   */
  async restoreWith(model: string, layout: SlotLayout, target: string | null, put: (f: KeptFile) => Promise<unknown>, waitMs?: number, from?: string): Promise<Restored | null> {
    const incoming = this.incoming.get(model);
    if (incoming && waitMs !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([incoming, new Promise((r) => (timer = setTimeout(r, waitMs)))]);
      clearTimeout(timer);
    } else await incoming;
    const k = this.kept.get(model);
    if (!k || (from !== undefined && (k.placementId !== from || k.layout !== layoutKey(layout)))) return null;
    if (k.origin !== null && k.origin !== target) return null; // left for the next replica on its own node
    this.kept.delete(model);
    try {
      if (k.layout !== layoutKey(layout)) return null;
      for (const f of k.files) {
        if ((await sha256File(this.path(f.file))) !== f.sha256) throw new Error(`${f.file} does not hash to what was kept (damaged)`);
        await put(f);
      }
      this.d.log.info({ model, from: k.placementId, slots: k.files.length, bytes: k.bytes }, 'restored the slots kept from the last replica');
      return { from: k.placementId, bytes: k.bytes };
    } catch (err) {
      this.d.log.warn({ model, message: (err as Error).message }, 'could not restore kept slots: the conversations start cold');
      // A partly restored server holds some prompts the routing does not know of: harmless (it only misses).
      return null;
    } finally {
      this.remove(k.files);
    }
  }

  /**
   * Forget `model`'s kept state (its file changed, it was removed, or a newer one replaces it); with `from`, only
   * if it was kept from that placement (a stale save of one replica never drops another's newer one).
   */
  drop(model: string, from?: string): void {
    const k = this.kept.get(model);
    if (!k || (from !== undefined && k.placementId !== from)) return;
    this.kept.delete(model);
    this.remove(k.files);
  }

  /** The placement whose prompts `model`'s kept state holds (the router keeps its keys until then). */
  keptFrom(model: string): string | null {
    return this.kept.get(model)?.placementId ?? null;
  }

  get budgetBytes(): number {
    return this.d.budgetBytes;
  }

  /** Room for `bytes` more within the budget (a node's state about to be fetched): the oldest kept states go first. */
  makeRoom(bytes: number): void {
    for (const [m] of [...this.kept].sort((a, b) => a[1].at - b[1].at)) {
      if (this.bytes + bytes <= this.d.budgetBytes) break;
      this.drop(m);
    }
  }

  /** Files written to the store that will not be kept (a fetch that failed half-way). */
  discardFiles(files: readonly { file: string }[]): void {
    this.remove(files);
  }

  /** Best effort: a file that cannot go (Windows' EBUSY, EPERM) is logged, never thrown at a start or a stop. */
  private remove(files: readonly { file: string }[]): void {
    for (const f of files) {
      try {
        rmSync(this.path(f.file), { force: true });
      } catch (err) {
        this.d.log.warn({ file: f.file, message: (err as Error).message }, 'could not remove a kept slot file');
      }
    }
  }
}

async function getJson(url: string): Promise<unknown> {
  const r = await fetch(url, { signal: AbortSignal.timeout(SLOT_IO_TIMEOUT_MS) });
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function postJson(url: string, body: unknown): Promise<unknown> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(SLOT_IO_TIMEOUT_MS) });
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}
