import { ErrorCode, RelayError } from '../../../../../shared/errors.js';

/**
 * Ollama's requests (api/types.go: ChatRequest, GenerateRequest, EmbedRequest) as llama-server requests — pure.
 * A chat goes to llama-server's OpenAI chat completions (its template, tool-call and thinking parsers); a raw
 * generate to its own /completion; a generate with a suffix to /infill (fill in the middle); embeddings to
 * /v1/embeddings. Generation always streams upstream: one parser for both of Ollama's answers, and the stall watch
 * hears every token. What a request asks that relay does not do is refused with a reason, never dropped silently —
 * except the options that are the pool's to set (num_ctx, num_gpu, num_thread…: a model's context is
 * `relay models set NAME --ctx N`), which Ollama's own clients send with every request.
 */

type Json = Record<string, unknown>;

/** How llama-server's answer reads: OpenAI chat chunks, or its own /completion and /infill chunks. */
export type UpstreamFormat = 'chat' | 'native';

export interface Upstream {
  readonly path: string;
  readonly body: Json;
  readonly format: UpstreamFormat;
}

function bad(msg: string): never {
  throw new RelayError(ErrorCode.INVALID_REQUEST, msg);
}

function notSupported(msg: string): never {
  throw new RelayError(ErrorCode.NOT_SUPPORTED, msg);
}

/** The request's model name, as the client gave it. */
export function modelField(b: Json): string {
  const m = b.model ?? b.name; // /api/show took "name" before "model"
  if (typeof m !== 'string' || m === '') bad('"model" must be a non-empty string naming a registered model');
  return m;
}

/** Ollama's name for a registered model: `:latest` when it has no tag of its own. */
export function ollamaName(name: string): string {
  return name.includes(':') ? name : `${name}:latest`;
}

/** The registered model an Ollama name means: itself, or without `:latest` (Ollama adds it to untagged names). */
export function registeredName(name: string, has: (n: string) => boolean): string {
  if (has(name)) return name;
  const bare = name.endsWith(':latest') ? name.slice(0, -':latest'.length) : name;
  return has(bare) ? bare : name;
}

/** Whether the client wants NDJSON lines (Ollama's default) or one JSON body. */
export function wantsStream(b: Json): boolean {
  if (b.stream !== undefined && typeof b.stream !== 'boolean') bad('"stream" must be a boolean');
  return b.stream !== false;
}

/** Ollama's sampling options with llama-server's names (the same for most); `num_predict` is `predictKey`. */
const SAMPLERS: Readonly<Record<string, string>> = {
  temperature: 'temperature',
  top_k: 'top_k',
  top_p: 'top_p',
  min_p: 'min_p',
  typical_p: 'typical_p',
  seed: 'seed',
  repeat_penalty: 'repeat_penalty',
  repeat_last_n: 'repeat_last_n',
  presence_penalty: 'presence_penalty',
  frequency_penalty: 'frequency_penalty',
  mirostat: 'mirostat',
  mirostat_tau: 'mirostat_tau',
  mirostat_eta: 'mirostat_eta',
  num_keep: 'n_keep',
};

export function samplers(options: unknown, predictKey: 'max_tokens' | 'n_predict'): Json {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) bad('"options" must be an object');
  const o = options as Json;
  const out: Json = {};
  for (const [k, v] of Object.entries(o)) {
    const to = SAMPLERS[k];
    if (to === undefined || v === null) continue;
    if (typeof v !== 'number') bad(`options.${k} must be a number`);
    out[to] = v;
  }
  // -1: until the model stops, -2: fill the context; llama-server's default (none) is the first.
  if (o.num_predict !== undefined && o.num_predict !== null) {
    if (!Number.isInteger(o.num_predict)) bad('options.num_predict must be an integer');
    if ((o.num_predict as number) >= 0) out[predictKey] = o.num_predict;
  }
  if (o.stop !== undefined && o.stop !== null) {
    const stop = typeof o.stop === 'string' ? [o.stop] : o.stop;
    if (!Array.isArray(stop) || !stop.every((s) => typeof s === 'string')) bad('options.stop must be a string or an array of strings');
    out.stop = stop;
  }
  return out;
}

/** `format`: "json" or a JSON schema, as llama-server's grammar-constrained output. */
function formatField(format: unknown, upstream: UpstreamFormat): Json {
  if (format === undefined || format === null || format === '') return {};
  const schema = format === 'json' ? { type: 'object' } : format;
  if (typeof schema !== 'object' || Array.isArray(schema)) bad('"format" must be "json" or a JSON schema object');
  if (upstream === 'native') return { json_schema: schema };
  // Not OpenAI's json_object: llama-server constrains that only when it carries a schema.
  return { response_format: { type: 'json_schema', json_schema: { name: format === 'json' ? 'json' : 'schema', schema } } };
}

/** `think`: true / false, or a level ("low", "medium", "high") for the models that take one. */
function thinkField(think: unknown): Json {
  if (think === undefined || think === null) return {};
  if (typeof think === 'boolean') return { chat_template_kwargs: { enable_thinking: think } };
  if (think === 'low' || think === 'medium' || think === 'high') return { chat_template_kwargs: { enable_thinking: true }, reasoning_effort: think };
  return bad('"think" must be true, false, "low", "medium" or "high"');
}

/** An image's media type from its first bytes (base64): llama-server is given a data: URL. */
function imageUrl(b64: unknown): Json {
  if (typeof b64 !== 'string' || b64 === '') bad('each image must be a base64 string');
  const type = b64.startsWith('/9j/') ? 'jpeg' : b64.startsWith('R0lG') ? 'gif' : b64.startsWith('UklG') ? 'webp' : 'png';
  return { type: 'image_url', image_url: { url: `data:image/${type};base64,${b64}` } };
}

/** One of Ollama's messages as an OpenAI one: images as image parts, tool calls with JSON-string arguments. */
function toOpenAi(m: unknown, i: number): Json {
  if (typeof m !== 'object' || m === null) bad(`messages[${i}] must be an object`);
  const { role, content, images, tool_calls: calls, tool_name: toolName, tool_call_id: callId, thinking } = m as Json;
  if (typeof role !== 'string' || role === '') bad(`messages[${i}].role must be a string`);
  if (content !== undefined && content !== null && typeof content !== 'string') bad(`messages[${i}].content must be a string`);
  const text = (content as string | undefined) ?? '';
  const out: Json = { role: role.toLowerCase(), content: text };
  if (images !== undefined && images !== null) {
    if (!Array.isArray(images)) bad(`messages[${i}].images must be an array of base64 strings`);
    if (images.length > 0) out.content = [...(text ? [{ type: 'text', text }] : []), ...images.map(imageUrl)];
  }
  if (Array.isArray(calls) && calls.length > 0) {
    out.tool_calls = calls.map((c: unknown, j) => {
      const f = (c as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
      if (!f || typeof f.name !== 'string') bad(`messages[${i}].tool_calls[${j}].function.name must be a string`);
      const args = typeof f.arguments === 'string' ? f.arguments : JSON.stringify(f.arguments ?? {});
      return { id: (c as { id?: unknown }).id ?? `call_${i}_${j}`, type: 'function', function: { name: f.name, arguments: args } };
    });
  }
  if (typeof toolName === 'string') out.name = toolName;
  if (typeof callId === 'string') out.tool_call_id = callId;
  if (typeof thinking === 'string' && thinking !== '') out.reasoning_content = thinking;
  return out;
}

/** Whether a chat or generate request has nothing to generate: Ollama's way to load (or, keep_alive 0, unload) a model. */
export function isLoadOnly(b: Json, kind: 'chat' | 'generate'): boolean {
  if (kind === 'chat') return b.messages === undefined || b.messages === null || (Array.isArray(b.messages) && b.messages.length === 0);
  return (b.prompt === undefined || b.prompt === '') && (b.suffix === undefined || b.suffix === '');
}

/** keep_alive 0 ("0", "0s", 0): unload now. */
export function unloadsNow(keepAlive: unknown): boolean {
  return keepAlive === 0 || (typeof keepAlive === 'string' && /^0+(\.0+)?[a-z]*$/.test(keepAlive.trim()));
}

/** POST /api/chat → llama-server's chat completions. `tool_choice` passes through: relay's extension. */
export function chatUpstream(b: Json, model: string): Upstream {
  if (!Array.isArray(b.messages)) bad('"messages" must be an array');
  const body: Json = {
    model,
    messages: b.messages.map(toOpenAi),
    stream: true,
    ...samplers(b.options, 'max_tokens'),
    ...formatField(b.format, 'chat'),
    ...thinkField(b.think),
  };
  if (b.tools !== undefined && b.tools !== null) {
    if (!Array.isArray(b.tools)) bad('"tools" must be an array');
    if (b.tools.length > 0) body.tools = b.tools;
  }
  if (b.tool_choice !== undefined) body.tool_choice = b.tool_choice;
  return { path: '/v1/chat/completions', body, format: 'chat' };
}

/**
 * POST /api/generate → a suffix: /infill (the model's fill-in-the-middle tokens); raw: /completion, the prompt as
 * it is; otherwise a chat of the system prompt and the prompt, in the model's own template.
 */
export function generateUpstream(b: Json, model: string): Upstream {
  const prompt = b.prompt ?? '';
  if (typeof prompt !== 'string') bad('"prompt" must be a string');
  if (typeof b.template === 'string' && b.template !== '')
    notSupported('"template" is not supported: relay renders prompts with the GGUF\'s own chat template (send "raw": true with a prompt you formatted yourself)');
  if (Array.isArray(b.context) && b.context.length > 0) notSupported('"context" is not supported (relay does not return it): keep a conversation with /api/chat');
  if (typeof b.suffix === 'string' && b.suffix !== '') {
    return { path: '/infill', body: { input_prefix: prompt, input_suffix: b.suffix, stream: true, ...samplers(b.options, 'n_predict') }, format: 'native' };
  }
  if (b.raw === true) {
    if (Array.isArray(b.images) && b.images.length > 0) notSupported('"images" with "raw": true is not supported: send them without raw, or through /api/chat');
    return { path: '/completion', body: { prompt, stream: true, ...samplers(b.options, 'n_predict'), ...formatField(b.format, 'native') }, format: 'native' };
  }
  const messages: unknown[] = [];
  if (typeof b.system === 'string' && b.system !== '') messages.push({ role: 'system', content: b.system });
  messages.push({ role: 'user', content: prompt, images: b.images });
  return chatUpstream({ ...b, messages, tools: undefined, tool_choice: undefined }, model);
}

/** POST /api/embed (input: a string or strings) and the older /api/embeddings (prompt: one string, not normalized). */
export function embedUpstream(b: Json, model: string, legacy: boolean): Upstream {
  const input = legacy ? b.prompt : b.input;
  const ok = typeof input === 'string' || (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'string'));
  if (!ok) bad(legacy ? '"prompt" must be a string' : '"input" must be a string or a non-empty array of strings');
  // Ollama's /api/embeddings gives the raw vector, /api/embed the unit-length one (llama-server's default).
  return { path: '/v1/embeddings', body: { model, input, ...(legacy ? { embd_normalize: -1 } : {}) }, format: 'native' };
}
