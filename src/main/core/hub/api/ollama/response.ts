import { StringDecoder } from 'node:string_decoder';
import { ErrorCode, RelayError } from '../../../../../shared/errors.js';
import { OLLAMA_ERRORS } from './errors.js';
import { parseSseError } from '../../proxy/sse-error.js';
import type { Translator } from '../../proxy/proxy-types.js';
import type { UpstreamFormat } from './request.js';

/**
 * llama-server's streamed answers as Ollama's (api/types.go ChatResponse, GenerateResponse) — pure, fed bytes as
 * they come. Ollama's stream is NDJSON: one object per line, each with the model, created_at and the new text
 * (`message` for a chat, `response` for a generate), `done: false`; then a last line with `done: true`, the
 * done_reason and the counts and durations (nanoseconds) from llama-server's timings. Tool calls are gathered
 * across chunks and given whole, their arguments as objects. With `stream: false` the same pieces make one body.
 */

type Json = Record<string, unknown>;

interface Timings {
  cache_n?: number;
  prompt_n?: number;
  prompt_ms?: number;
  predicted_n?: number;
  predicted_ms?: number;
}

export interface AnswerShape {
  /** /api/chat answers `message`, /api/generate `response`. */
  readonly kind: 'chat' | 'generate';
  /** The model as the client named it (Ollama echoes it). */
  readonly model: string;
  readonly stream: boolean;
  readonly upstream: UpstreamFormat;
  /** When the request arrived and when a placement took it (the load_duration is the wait between). */
  readonly startedAt: number;
  readonly leasedAt: number;
  readonly now?: () => number;
}

const ns = (ms: number): number => Math.round(ms * 1e6);

/** The data lines of an SSE stream, parsed as they complete. */
class SseReader {
  private readonly decoder = new StringDecoder('utf8');
  private buf = '';
  push(b: Buffer): unknown[] {
    this.buf += this.decoder.write(b);
    const out: unknown[] = [];
    for (let i = this.buf.indexOf('\n'); i >= 0; i = this.buf.indexOf('\n')) {
      const line = this.buf.slice(0, i).trim();
      this.buf = this.buf.slice(i + 1);
      if (line.startsWith('error:')) out.push({ error: { message: parseSseError(line.slice(6).trim()).message } }); // a newer llama-server's failure (sse-error.ts)
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      try {
        out.push(JSON.parse(data));
      } catch {
        out.push({ error: { message: `llama-server sent a line that is not JSON: ${data.slice(0, 120)}` } });
      }
    }
    return out;
  }
}

export function ollamaGeneration(a: AnswerShape): Translator {
  const now = a.now ?? Date.now;
  const sse = new SseReader();
  let content = '';
  let thinking = '';
  const calls = new Map<number, { id?: string; name: string; args: string }>();
  let doneReason = 'stop';
  let timings: Timings = {};
  let failed: RelayError | null = null;

  const head = (): Json => ({ model: a.model, created_at: new Date(now()).toISOString() });
  const line = (o: Json): string => `${JSON.stringify(o)}\n`;
  const piece = (text: string, think: string, extra: Json = {}): Json => {
    if (a.kind === 'generate') return { ...head(), response: text, ...(think ? { thinking: think } : {}), done: false };
    return { ...head(), message: { role: 'assistant', content: text, ...(think ? { thinking: think } : {}), ...extra }, done: false };
  };

  /** One upstream event: the text it adds (for the stream), its stop reason and timings noted. */
  const take = (ev: Json): { text: string; think: string } => {
    if (ev.error !== undefined) {
      const e = ev.error as { message?: unknown } | string | null;
      const message = typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : 'llama-server reported an error';
      failed = new RelayError(ErrorCode.LLAMA_SERVER_ERROR, message);
      return { text: '', think: '' };
    }
    if (ev.timings) timings = ev.timings;
    if (a.upstream === 'native') {
      if (ev.stop === true) doneReason = ev.stop_type === 'limit' ? 'length' : 'stop';
      return { text: typeof ev.content === 'string' ? ev.content : '', think: '' };
    }
    const choice = (ev.choices as Json[] | undefined)?.[0];
    if (!choice) return { text: '', think: '' };
    if (typeof choice.finish_reason === 'string') doneReason = choice.finish_reason === 'length' ? 'length' : 'stop';
    const delta = (choice.delta ?? {}) as { content?: unknown; reasoning_content?: unknown; tool_calls?: unknown };
    for (const tc of Array.isArray(delta.tool_calls) ? (delta.tool_calls as Json[]) : []) {
      const i = typeof tc.index === 'number' ? tc.index : 0;
      const f = (tc.function ?? {}) as { name?: unknown; arguments?: unknown };
      const c = calls.get(i) ?? { name: '', args: '' };
      if (typeof tc.id === 'string') c.id = tc.id;
      if (typeof f.name === 'string') c.name += f.name;
      if (typeof f.arguments === 'string') c.args += f.arguments;
      calls.set(i, c);
    }
    return { text: typeof delta.content === 'string' ? delta.content : '', think: typeof delta.reasoning_content === 'string' ? delta.reasoning_content : '' };
  };

  /** The gathered tool calls as Ollama gives them: arguments an object (the model's JSON, parsed). */
  const toolCalls = (): Json[] =>
    [...calls.entries()]
      .sort((x, y) => x[0] - y[0])
      .map(([index, c]) => {
        let args: unknown;
        try {
          args = c.args.trim() === '' ? {} : JSON.parse(c.args);
        } catch {
          throw new RelayError(ErrorCode.LLAMA_SERVER_ERROR, `the model called ${c.name} with arguments that are not JSON: ${c.args.slice(0, 200)}`);
        }
        return { ...(c.id ? { id: c.id } : {}), function: { index, name: c.name, arguments: args } };
      });

  const metrics = (): Json => {
    const t = now();
    return {
      done_reason: doneReason,
      total_duration: ns(t - a.startedAt),
      load_duration: ns(a.leasedAt - a.startedAt),
      // The whole prompt, its cached part too, as Ollama counts it (its runner sets numPromptInputs before the cache
      // is consulted: runner/llamarunner/runner.go NewSequence).
      prompt_eval_count: (timings.cache_n ?? 0) + (timings.prompt_n ?? 0),
      prompt_eval_duration: ns(timings.prompt_ms ?? 0),
      eval_count: timings.predicted_n ?? 0,
      eval_duration: ns(timings.predicted_ms ?? 0),
    };
  };

  return {
    contentType: a.stream ? 'application/x-ndjson' : 'application/json; charset=utf-8',
    streams: a.stream,
    chunk(b) {
      if (failed) return '';
      let out = '';
      for (const ev of sse.push(b)) {
        const { text, think } = take(ev as Json);
        if (failed) return out + (a.stream ? this.broken(failed) : '');
        if (!a.stream) {
          content += text;
          thinking += think;
        } else if (text || think) out += line(piece(text, think));
      }
      return out;
    },
    end() {
      if (failed) {
        if (a.stream) return ''; // its error line went already
        throw failed;
      }
      const tools = toolCalls();
      const last = (text: string, think: string): Json => {
        const p = piece(text, think, tools.length > 0 && !a.stream ? { tool_calls: tools } : {});
        return { ...p, done: true, ...metrics() };
      };
      if (!a.stream) return JSON.stringify(last(content, thinking));
      const calling = tools.length > 0 ? line({ ...head(), message: { role: 'assistant', content: '', tool_calls: tools }, done: false }) : '';
      return calling + line(last('', ''));
    },
    broken(err) {
      return line(OLLAMA_ERRORS.answer(err).body as Json);
    },
  };
}

/** The model's ready (an empty chat or generate: Ollama's way to load one): the answer, in the request's kind. */
export function loadedAnswer(kind: 'chat' | 'generate', model: string, doneReason: 'load' | 'unload', at = Date.now()): Json {
  const head = { model, created_at: new Date(at).toISOString() };
  return kind === 'chat' ? { ...head, message: { role: 'assistant', content: '' }, done_reason: doneReason, done: true } : { ...head, response: '', done_reason: doneReason, done: true };
}

/** llama-server's /v1/embeddings answer as /api/embed's (`embeddings`) or /api/embeddings' (one `embedding`). */
export function ollamaEmbedding(a: { model: string; legacy: boolean; startedAt: number; leasedAt: number; now?: () => number }): Translator {
  const now = a.now ?? Date.now;
  const parts: Buffer[] = [];
  return {
    contentType: 'application/json; charset=utf-8',
    streams: false,
    chunk(b) {
      parts.push(b);
      return '';
    },
    end() {
      let r: { data?: { index?: number; embedding?: number[] }[]; usage?: { prompt_tokens?: number } };
      try {
        r = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof r;
      } catch {
        throw new RelayError(ErrorCode.LLAMA_SERVER_ERROR, 'llama-server answered embeddings that are not JSON');
      }
      const vectors = [...(r.data ?? [])].sort((x, y) => (x.index ?? 0) - (y.index ?? 0)).map((d) => d.embedding ?? []);
      if (a.legacy) return JSON.stringify({ embedding: vectors[0] ?? [] });
      return JSON.stringify({
        model: a.model,
        embeddings: vectors,
        total_duration: ns(now() - a.startedAt),
        load_duration: ns(a.leasedAt - a.startedAt),
        prompt_eval_count: r.usage?.prompt_tokens ?? 0,
      });
    },
    broken() {
      return '';
    },
  };
}
