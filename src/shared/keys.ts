/** API keys as /status, the admin API and the dashboard show them (issue #54): their rules and what they used. */

export type PriorityName = 'interactive' | 'background';

/** What a key used in a period (the hub's local day or calendar month). */
export interface UsageDto {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly requests: number;
  /** Its answers that gave their slot to an interactive request and went on afterwards. */
  readonly yields: number;
}

export interface KeyDto {
  readonly name: string;
  /** The key's first characters, to recognise it in a client's settings (never the key). */
  readonly prefix: string;
  readonly created_at: string;
  readonly last_used_at: string | null;
  /** Its class: background requests wait behind interactive ones and give their slots up to them. */
  readonly priority: PriorityName;
  /** Tokens (prompt and completion) it may use per local day; null: no limit. */
  readonly max_tokens_per_day: number | null;
  /** Requests it may have in flight at once; null: no limit. */
  readonly max_concurrent: number | null;
  /** Its requests in flight now (waiting or answered). */
  readonly in_flight: number;
  readonly today: UsageDto;
  readonly month: UsageDto;
}

/** What requests without a key used (the hub's own loopback, the dashboard, a hub without keys). */
export interface NoKeyUsageDto {
  readonly in_flight: number;
  readonly today: UsageDto;
  readonly month: UsageDto;
}
