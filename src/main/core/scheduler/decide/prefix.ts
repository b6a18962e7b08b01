/**
 * Prefix-aware routing's memory, pure: which placement recently served which prompt prefixes. A request's prompt
 * comes as a chain of keys (hub/proxy/prompt-prefix.ts: keys[i] stands for its first i+1 blocks — the system prompt and
 * tools, then each message — and chars[i] for how many characters they hold), so the longest prefix a placement
 * holds is the last of the request's keys it has seen. Nothing is tokenized: characters stand in for tokens.
 */

export interface PromptPrefix {
  /** Chained hashes: keys[i] covers the prompt's blocks 0..i. */
  readonly keys: readonly string[];
  /** chars[i]: how many characters of the prompt keys[i] covers (increasing). */
  readonly chars: readonly number[];
}

/** How many keys a placement remembers (least recently used go first): hundreds of conversations' worth. */
export const KEYS_PER_PLACEMENT = 4096;

/** Characters per token, for turning a prefix into prompt time (a rough mean for English text and code). */
export const CHARS_PER_TOKEN = 4;

export class PrefixIndex {
  private readonly held = new Map<string, Map<string, true>>();

  constructor(private readonly max = KEYS_PER_PLACEMENT) {}

  /**
   * The placement is about to evaluate this prompt: from now on its KV cache holds every prefix of it. The shortest
   * prefix is the freshest (the longest goes first when room runs out), so what is held stays prefix-closed.
   */
  record(placementId: string, prefix: PromptPrefix): void {
    let keys = this.held.get(placementId);
    if (!keys) this.held.set(placementId, (keys = new Map()));
    for (let i = prefix.keys.length - 1; i >= 0; i--) {
      keys.delete(prefix.keys[i]!);
      keys.set(prefix.keys[i]!, true);
    }
    for (const oldest of keys.keys()) {
      if (keys.size <= this.max) break;
      keys.delete(oldest);
    }
  }

  /** Characters of the longest prefix of `prefix` the placement holds (0: none). */
  matched(placementId: string, prefix: PromptPrefix): number {
    const keys = this.held.get(placementId);
    if (!keys) return 0;
    for (let i = prefix.keys.length - 1; i >= 0; i--) if (keys.has(prefix.keys[i]!)) return prefix.chars[i]!;
    return 0;
  }

  /** The placement stopped: its KV cache is gone. */
  forget(placementId: string): void {
    this.held.delete(placementId);
  }

  /** `to` now holds what `from` held (its KV cache was restored into `to`). */
  rename(from: string, to: string): void {
    const keys = this.held.get(from);
    this.held.delete(from);
    if (keys) this.held.set(to, keys);
  }

  /** Keys remembered for a placement (for the tests). */
  size(placementId: string): number {
    return this.held.get(placementId)?.size ?? 0;
  }
}
