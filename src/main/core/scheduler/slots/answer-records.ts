import { readStateTokens, type SlotTokens } from '../../llama/slot-state.js';

export type { SlotTokens } from '../../llama/slot-state.js';

/**
 * What a stopped placement's slots held, as token lists: the record a moved answer continues from
 * (hub/proxy/exact.ts). llama-server's `/slots/{id}?action=save` writes a slot's state file — its tokens first,
 * then its KV —, the same file a kept conversation is (slot-keep.ts): a stop with answers in flight saves its slots,
 * and their token lists are read from the files' heads here, whether the KV is then kept or not. An answer that
 * yields its slot to a person (run/yields.ts) leaves a record too: its placement's idle slots, read while the slot
 * is held (Launcher.recordSlots); a newer record of a placement replaces its last. A record serves the answers of the
 * stop or yield that made it, and goes: at most a few records are held, for RECORD_TTL_MS.
 */

/** The token lists of state files just saved or fetched into the keeper's folder (a file that is not one: left out). */
export async function slotTokens(keeper: { path(file: string): string }, files: readonly { slot: number; file: string }[]): Promise<SlotTokens[]> {
  const out: SlotTokens[] = [];
  for (const f of files) {
    const tokens = await readStateTokens(keeper.path(f.file)).catch(() => null);
    if (tokens) out.push({ slot: f.slot, tokens });
  }
  return out;
}

/** How long a stop's record waits for the answers that moved off it. */
const RECORD_TTL_MS = 120_000;
/** The most stops' records held at once (the oldest go first). */
const MAX_RECORDS = 16;

interface Entry {
  readonly at: number;
  readonly ready: Promise<SlotTokens[]>;
}

export class AnswerRecords {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** `placementId` is stopping with answers in flight: its record arrives with `ready` (empty: none could be made). */
  expect(placementId: string, ready: Promise<SlotTokens[]>): void {
    this.expire();
    const settled = ready.catch(() => [] as SlotTokens[]);
    this.entries.set(placementId, { at: this.now(), ready: settled });
    while (this.entries.size > MAX_RECORDS) this.entries.delete(this.entries.keys().next().value!);
  }

  /** The record of `placementId`'s stop, waited for at most `waitMs`; empty when there is none or it came late. */
  async wait(placementId: string, waitMs: number): Promise<SlotTokens[]> {
    this.expire();
    const e = this.entries.get(placementId);
    if (!e) return [];
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<SlotTokens[]>((r) => (timer = setTimeout(() => r([]), waitMs)));
    try {
      return await Promise.race([e.ready, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private expire(): void {
    for (const [id, e] of [...this.entries]) if (this.now() - e.at > RECORD_TTL_MS) this.entries.delete(id);
  }
}
