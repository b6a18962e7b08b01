import { open } from 'node:fs/promises';

/**
 * What a stopped placement's slots held, as token lists: the record a moved answer continues from
 * (hub/proxy/exact.ts). llama-server's `/slots/{id}?action=save` writes a slot's state file — its tokens first,
 * then its KV —, the same file a kept conversation is (slot-keep.ts): a stop with answers in flight saves its slots,
 * and their token lists are read from the files' heads here, whether the KV is then kept or not. A record serves the
 * answers of the stop that made it, and goes: at most a few stops' records are held, for RECORD_TTL_MS.
 */

/** One slot's tokens: the prompts it evaluated and the answer it generated, as llama-server itself tokenized them. */
export interface SlotTokens {
  readonly slot: number;
  readonly tokens: readonly number[];
}

/** llama.cpp's state file: magic 'ggsq', version 3, then the token count and the tokens (llama-context.cpp). */
const MAGIC = 0x67677371;
const VERSION = 3;
/** The server's own token list inside it (server-common.cpp server_tokens::serialize): a marker, its version 1. */
const PACKED_MARKER = -1;
const PACKED_VERSION = 1;
/** The most tokens a record is read with (a slot's context: 2^22 is above any model's). */
const MAX_TOKENS = 1 << 22;

/**
 * Pure: the text tokens a state file's head holds (`head` at least its first 12 + 4 × count bytes), or null: not a
 * slot state, another version, a state with images in it (their chunks are no tokens of the vocabulary), damaged.
 */
export function stateTokens(head: Buffer): number[] | null {
  if (head.byteLength < 12 || head.readUInt32LE(0) !== MAGIC || head.readUInt32LE(4) !== VERSION) return null;
  const n = head.readUInt32LE(8);
  if (n > MAX_TOKENS || head.byteLength < 12 + 4 * n) return null;
  const words: number[] = [];
  for (let i = 0; i < n; i++) words.push(head.readInt32LE(12 + 4 * i));
  if (words[0] !== PACKED_MARKER) return words; // a plain list, as older servers wrote it
  if (words[1] !== PACKED_VERSION || words.length < 4) return null;
  const count = words[2]!;
  if (count < 0 || 3 + count + 1 > words.length) return null;
  if (words[3 + count] !== 0) return null; // media chunks follow
  return words.slice(3, 3 + count);
}

/** The token list of the state file at `path` (its head read, not the KV after it). */
export async function readStateTokens(path: string): Promise<number[] | null> {
  const f = await open(path, 'r');
  try {
    const start = Buffer.alloc(12);
    if ((await f.read(start, 0, 12, 0)).bytesRead < 12) return null;
    const n = start.readUInt32LE(8);
    if (n > MAX_TOKENS) return null;
    const head = Buffer.alloc(12 + 4 * n);
    const { bytesRead } = await f.read(head, 0, head.byteLength, 0);
    return stateTokens(head.subarray(0, bytesRead));
  } finally {
    await f.close();
  }
}

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
