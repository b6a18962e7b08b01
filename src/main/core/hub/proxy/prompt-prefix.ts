import { createHash } from 'node:crypto';
import type { PromptPrefix } from '../../scheduler/decide/prefix.js';

/**
 * A generation request's prompt as prefix-routing keys (scheduler/decide/prefix.ts), from the body the hub parsed
 * already, whatever its dialect: the blocks llama-server's template renders first — the system prompt or
 * instructions and the tools — then each message (OpenAI's and Anthropic's `messages`, the Responses API's
 * `input` items, Ollama's turned into OpenAI's), or a plain prompt in blocks of 1 KiB. Each key hashes every
 * block up to it, so a conversation's next turn, which resends it all and adds to the end, shares every key of
 * the turn before. Anthropic's `cache_control` marks move from turn to turn and change nothing rendered: they
 * are left out. No tokenizing; one hash pass over the prompt's characters. Null: no prompt to route by.
 */

const BLOCK_CHARS = 1024;

export function promptPrefix(json: Record<string, unknown>): PromptPrefix | null {
  const blocks: string[] = [];
  const head = [json.system, json.instructions, json.tools].filter((x) => x !== undefined);
  if (head.length > 0) blocks.push(serialize(head));
  const list = Array.isArray(json.messages) ? json.messages : Array.isArray(json.input) ? json.input : null;
  const text = typeof json.prompt === 'string' ? json.prompt : typeof json.input === 'string' ? json.input : null;
  if (list) for (const m of list) blocks.push(serialize(m));
  else if (text !== null) for (let i = 0; i < text.length; i += BLOCK_CHARS) blocks.push(text.slice(i, i + BLOCK_CHARS));
  if (blocks.length === 0 || (list === null && text === null)) return null;
  const hash = createHash('sha1');
  const keys: string[] = [];
  const chars: number[] = [];
  let n = 0;
  for (const b of blocks) {
    hash.update(b);
    hash.update('\u0000');
    n += b.length;
    keys.push(hash.copy().digest('base64url').slice(0, 16));
    chars.push(n);
  }
  return { keys, chars };
}

function serialize(x: unknown): string {
  const s = JSON.stringify(x) ?? '';
  return s.includes('"cache_control"') ? JSON.stringify(x, (k, v: unknown) => (k === 'cache_control' ? undefined : v)) : s;
}
