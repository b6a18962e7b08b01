/** The hub's recent requests and the answers that moved, as /status shows them. */

/** One request through /v1, as the dashboard's request log shows it. */
export interface RecentRequest {
  at: string;
  model: string;
  endpoint: string;
  status: number;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  tokens_per_second: number | null;
  ms: number;
  /** How many times its answer moved to another placement mid-stream (its placement stopped); absent: none. */
  moves?: number;
  /** How many times it gave its slot to an interactive request and went on; absent: none. */
  yields?: number;
  /** The name of the API key it came with (never the key); null: none. */
  key?: string | null;
}

/** An answer in flight whose placement stopped: where it went on, or why it could not. */
export interface MoveDto {
  readonly at: string;
  readonly model: string;
  readonly endpoint: string;
  /** The machines of the placement that stopped, and of the one that continued ("hub", "kitchen", "hub+attic"). */
  readonly from: string;
  readonly to: string | null;
  readonly why: string; // why its placement stopped ("node kitchen paused (paused by the owner)")
  /** Tokens the client had been sent before the stop. */
  readonly sent_tokens: number;
  /** From the stop to the continuation's first byte: the client's longest wait between two tokens (null: ended). */
  readonly gap_ms: number | null;
  /**
   * Of the continuation's prompt (the original prompt and the sent answer), the tokens its placement found in its KV
   * cache — the answer's own KV when it was carried there (slot-carry.ts) — once it has ended (null before, or ended).
   */
  cached_tokens: number | null;
  /** The bytes of the answer's KV read into the continuation's placement (0: it evaluated its history again). */
  readonly state_bytes: number;
  readonly outcome: 'continued' | 'ended';
  /** It went on from its first placement's own tokens, not from the sent text tokenized again (absent: it ended). */
  readonly exact?: boolean;
  /** Why it ended (no other placement, a tool call had begun…), or why it went on from its text, not its own tokens. */
  readonly detail?: string;
}
