/** Minimal OpenAI-shaped calls straight to a llama-server (the hub's own client tests use the openai package). */
export interface Completion {
  text: string;
  completionTokens: number;
}

async function post(url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

export const GREEDY = { temperature: 0, top_k: 1, seed: 42 } as const;
/** GREEDY for the OpenAI SDK's create(): top_k is llama.cpp's, so the SDK's parameter types do not name it. */
export const GREEDY_EXTRA: Record<string, unknown> = GREEDY;

export async function complete(baseUrl: string, prompt: string, maxTokens = 24): Promise<Completion> {
  const j = await post(`${baseUrl}/v1/completions`, { prompt, max_tokens: maxTokens, ...GREEDY });
  const choices = j.choices as { text: string }[];
  return { text: choices[0]!.text, completionTokens: (j.usage as { completion_tokens: number }).completion_tokens };
}

/** `model`: for a hub (which routes by it); a bare llama-server answers whatever is named. */
export async function chat(baseUrl: string, content: string, maxTokens = 24, model?: string): Promise<Completion> {
  const j = await post(`${baseUrl}/v1/chat/completions`, { ...(model ? { model } : {}), messages: [{ role: 'user', content }], max_tokens: maxTokens, ...GREEDY });
  const choices = j.choices as { message: { content: string } }[];
  return { text: choices[0]!.message.content, completionTokens: (j.usage as { completion_tokens: number }).completion_tokens };
}

/**
 * Read a streaming completion; on its `n`-th content chunk run `act` (pause a node, kill a process…).
 * Resolves 'done' if the stream completed, 'error' if it ended with an error.
 */
export async function streamUntil(stream: AsyncIterable<{ choices: { text?: string; delta?: { content?: string | null } }[] }>, n: number, act: () => unknown): Promise<'done' | 'error'> {
  let got = 0;
  try {
    for await (const c of stream) {
      const ch = c.choices[0];
      if ((ch?.text ?? ch?.delta?.content) && ++got === n) await act();
    }
    return 'done';
  } catch {
    return 'error';
  }
}

export interface ChatTurn {
  readonly text: string;
  readonly prompt: number;
  /** llama-server's `cached_tokens`: how much of the prompt was in its KV cache. */
  readonly cached: number;
}

/** A conversation through /v1/chat/completions at temperature 0: each turn resends the history, the answers added. */
export function chatConversation(baseUrl: string, system: string, model = 'm'): { say(content: string): Promise<ChatTurn> } {
  const messages: { role: string; content: string }[] = [{ role: 'system', content: system }];
  return {
    async say(content) {
      messages.push({ role: 'user', content });
      const res = await fetch(`${baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages, max_tokens: 8, ...GREEDY }),
      });
      const j = (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
      if (res.status !== 200) throw new Error(`chat turn: ${res.status} ${JSON.stringify(j)}`);
      const text = j.choices[0]!.message.content;
      messages.push({ role: 'assistant', content: text });
      return { text, prompt: j.usage.prompt_tokens, cached: j.usage.prompt_tokens_details?.cached_tokens ?? 0 };
    },
  };
}
