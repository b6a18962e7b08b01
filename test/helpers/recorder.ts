import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request a client sent, and the form of what it got back (not its text: sampled text differs run to run). */
export interface Exchange {
  readonly method: string;
  readonly path: string;
  /** The request's body, as sent. */
  readonly request: string;
  readonly status: number;
  /**
   * `json:<object|type>`, `json:error`, `sse:<kinds>` (each event's name, or its data's object/type, `[DONE]`,
   * `error`; repeats collapsed: the form of a stream, whatever its length), or `other`.
   */
  readonly form: string;
  /** The error's code (or type) where the answer is one. */
  readonly error: string | null;
  /** The error's type and message where the answer is one. */
  readonly errorType: string | null;
  readonly message: string | null;
  /** The assistant text the answer carried (OpenAI chat, Responses, Anthropic Messages), streamed or not. */
  readonly text: string;
}

export interface Recorder {
  readonly origin: string;
  readonly exchanges: Exchange[];
  close(): Promise<void>;
}

/** A pass-through HTTP proxy on 127.0.0.1 in front of `target` (an origin) that records every exchange. */
export async function startRecorder(target: string): Promise<Recorder> {
  const up = new URL(target);
  const exchanges: Exchange[] = [];
  const server: Server = createServer((req, res) => {
    const sent: Buffer[] = [];
    req.on('data', (c: Buffer) => sent.push(c));
    const out = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: { ...req.headers, host: up.host } }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      const chunks: Buffer[] = [];
      answer.on('data', (c: Buffer) => {
        chunks.push(c);
        res.write(c);
      });
      answer.on('end', () => {
        res.end();
        const body = Buffer.concat(chunks).toString('utf8');
        exchanges.push({
          method: req.method ?? '',
          path: (req.url ?? '').split('?')[0]!,
          request: Buffer.concat(sent).toString('utf8'),
          status: answer.statusCode ?? 0,
          ...formOf(String(answer.headers['content-type'] ?? ''), body),
        });
      });
    });
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    exchanges,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

type Json = Record<string, unknown>;

/** A field as text: strings and numbers as they are, anything else as `fallback`. */
function field(v: unknown, fallback: string): string {
  return typeof v === 'string' || typeof v === 'number' ? String(v) : fallback;
}

function formOf(contentType: string, body: string): Pick<Exchange, 'form' | 'error' | 'errorType' | 'message' | 'text'> {
  if (contentType.includes('text/event-stream')) {
    const kinds: string[] = [];
    let error: string | null = null;
    let errorType: string | null = null;
    let message: string | null = null;
    let text = '';
    for (const block of body.split(/\r?\n\r?\n/)) {
      const name = /^event:\s*(.+)$/m.exec(block)?.[1]?.trim();
      const data = [...block.matchAll(/^data:\s?(.*)$/gm)].map((m) => m[1]).join('\n');
      if (!name && !data) continue;
      let kind = name ?? '';
      if (data === '[DONE]') kind ||= '[DONE]';
      else if (data) {
        const j = parse(data);
        if (j?.error) {
          kind = 'error';
          ({ error, errorType, message } = errorOf(j));
        } else if (j) {
          kind ||= field(j.object ?? j.type, 'data');
          text += deltaText(j);
        }
      }
      if (kinds[kinds.length - 1] !== kind) kinds.push(kind);
    }
    return { form: `sse:${kinds.join(',')}`, error, errorType, message, text };
  }
  if (contentType.includes('json')) {
    const j = parse(body);
    if (!j) return { form: 'json:unparsable', ...NO_ERROR, text: '' };
    if (j.error) return { form: 'json:error', ...errorOf(j), text: '' };
    return { form: `json:${field(j.object ?? j.type, 'object')}`, ...NO_ERROR, text: wholeText(j) };
  }
  return { form: 'other', ...NO_ERROR, text: '' };
}

function parse(s: string): Json | null {
  try {
    const v: unknown = JSON.parse(s);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : null;
  } catch {
    return null;
  }
}

const NO_ERROR = { error: null, errorType: null, message: null };

function errorOf(j: Json): Pick<Exchange, 'error' | 'errorType' | 'message'> {
  const e = j.error as Json | string;
  if (typeof e === 'string') return { error: e, errorType: null, message: e };
  return { error: field(e.code ?? e.type, 'error'), errorType: field(e.type, '') || null, message: field(e.message, '') || null };
}

/** The text one streamed event adds: a chat chunk's delta, a Responses output_text delta, a Messages text delta. */
function deltaText(j: Json): string {
  const choices = j.choices as { delta?: { content?: string | null } }[] | undefined;
  if (choices) return choices.map((c) => c.delta?.content ?? '').join('');
  if (j.type === 'response.output_text.delta') return field(j.delta, '');
  if (j.type === 'content_block_delta') return field((j.delta as Json | undefined)?.text, '');
  return '';
}

function wholeText(j: Json): string {
  const choices = j.choices as { message?: { content?: string | null } }[] | undefined;
  if (choices) return choices.map((c) => c.message?.content ?? '').join('');
  if (j.object === 'response') {
    const out = (j.output as { type: string; content?: { type: string; text?: string }[] }[] | undefined) ?? [];
    return out
      .flatMap((o) => o.content ?? [])
      .map((c) => (c.type === 'output_text' ? (c.text ?? '') : ''))
      .join('');
  }
  if (j.type === 'message') return ((j.content as { type: string; text?: string }[] | undefined) ?? []).map((c) => (c.type === 'text' ? (c.text ?? '') : '')).join('');
  return '';
}
