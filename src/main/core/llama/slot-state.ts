import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * How large llama-server's saved slot state is (`/slots/{id}?action=save`: llama.cpp's state file), estimated
 * before a byte is written or fetched. One estimate for the hub (its own replicas' saves, a node's sizes checked
 * before they are fetched) and the node (its saves): a header, the token list (4 bytes a token and the server's
 * own framing), then per token its KV of every layer and its cell's position and sequence, and the recurrent state a
 * hybrid model keeps whatever the length. An upper bound: sliding-window layers are counted whole.
 */

/** The file's fixed part: magic, versions, the model's name, each layer's row sizes and types (generous). */
const FIXED_BYTES = 64 * 1024;
/** Per token beyond its KV: its id in the token list, its cell's position and sequence count. */
const PER_TOKEN_BYTES = 4 + 8;

export function slotStateBytes(tokens: number, kvBytesPerToken: number, stateBytes = 0): number {
  return FIXED_BYTES + tokens * (kvBytesPerToken + PER_TOKEN_BYTES) + stateBytes;
}

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

/** The slots of a running llama-server that hold a prompt and run nothing now, as `/slots` lists them. */
interface SlotInfo {
  readonly id: number;
  readonly is_processing?: boolean;
  readonly n_prompt_tokens?: number;
}

/** How long reading a running server's idle slots may take in all (a save writes each one's KV). */
const IDLE_SLOTS_BUDGET_MS = 10_000;
/** How often `/slots` is asked while the yielded answer's slot has not stopped yet. */
const SLOTS_POLL_MS = 10;

/**
 * The token lists of the idle slots of the llama-server at `baseUrl` (one just given up by a yielded answer among
 * them): each saved under `dir` with `/slots/{id}?action=save` (its head read, the file removed). A slot that is
 * generating is left alone (its save would wait for its answer to end). The yielded answer's request was cancelled
 * by closing its connection, which llama-server notices at its next token: `/slots` is asked again until at most
 * `busy` slots (the answers still running) generate.
 */
export async function idleSlotTokens(baseUrl: string, dir: string, prefix: string, busy: number): Promise<SlotTokens[]> {
  const signal = AbortSignal.timeout(IDLE_SLOTS_BUDGET_MS);
  let slots: SlotInfo[];
  for (;;) {
    const r = await fetch(`${baseUrl}/slots`, { signal });
    if (!r.ok) throw new Error(`/slots answered ${r.status}`);
    slots = (await r.json()) as SlotInfo[];
    if (slots.filter((s) => s.is_processing).length <= busy) break;
    await new Promise((res) => setTimeout(res, SLOTS_POLL_MS));
  }
  const idle = slots.filter((s) => !s.is_processing && (s.n_prompt_tokens ?? 0) > 0);
  const out: SlotTokens[] = [];
  for (const s of idle) {
    const file = `${prefix}-${s.id}.bin`;
    const saved = await fetch(`${baseUrl}/slots/${s.id}?action=save`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ filename: file }), signal });
    if (!saved.ok) continue;
    const path = join(dir, file);
    try {
      const tokens = await readStateTokens(path);
      if (tokens) out.push({ slot: s.id, tokens });
    } finally {
      await rm(path, { force: true });
    }
  }
  return out;
}
