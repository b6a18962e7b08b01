import assert from 'node:assert/strict';
import type { RequestListener } from 'node:http';
import { describe, it } from 'node:test';
import { endingError } from '../../src/main/core/hub/proxy/sse-error.js';
import { ollamaGeneration } from '../../src/main/core/hub/api/ollama/response.js';
import type { ErrorShape } from '../../src/main/core/hub/http/errors.js';
import { OPENAI_ERRORS } from '../../src/main/core/hub/http/errors.js';
import { ANTHROPIC_ERRORS } from '../../src/main/core/hub/api/anthropic.js';
import { readAll, throughProxy } from '../helpers/proxy-harness.js';

/**
 * llama-server's failure in the middle of a stream, in both forms: the pinned server's `data: {"error": …}` and a
 * newer one's `error: {…}` line, which SSE clients skip — passed on as it came, the answer would look finished, cut
 * short. Each dialect ends such a stream with its own error event. The upstream here is a socket that answers with
 * those exact bytes (the pinned llama-server cannot be made to send the newer form).
 */
const TOKEN = 'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n';
const NEWER = 'error: {"code":500,"message":"the model produced output that does not match the expected format","type":"server_error"}\n\n';

/** llama-server's answer: a token, then the newer form of its error, cut in the middle of its line as TCP may. */
const upstream: RequestListener = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(TOKEN);
  res.write(NEWER.slice(0, 9));
  setImmediate(() => res.end(NEWER.slice(9)));
};
const through = (shape: ErrorShape): Promise<string> => throughProxy(upstream, shape, readAll);

describe("llama-server's error mid-stream, in the form a newer llama-server sends it", () => {
  it("is read from the stream's last line only: a data line that mentions it is not one", () => {
    assert.equal(endingError(`${TOKEN}${NEWER}`)?.message, 'the model produced output that does not match the expected format');
    assert.equal(endingError(`${TOKEN}data: {"text":"error: inside"}\n\n`), null);
    assert.equal(endingError(`${NEWER}${TOKEN}`), null, 'an error line is the last thing llama-server sends');
    assert.equal(endingError('error: {"error":"plain"}\n\n')?.message, 'plain');
  });

  it('OpenAI chat and completions, and Responses: the text so far, then an error event the SDKs raise', async () => {
    const text = await through(OPENAI_ERRORS);
    assert.ok(text.startsWith(TOKEN), text);
    assert.match(text, /\ndata: \{"error":\{[^\n]*"message":"the model produced output that does not match the expected format"/);
  });

  it('Anthropic Messages: the text so far, then its `event: error`', async () => {
    const text = await through(ANTHROPIC_ERRORS);
    assert.ok(text.startsWith(TOKEN), text);
    assert.match(text, /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"the model produced output that does not match the expected format"\}\}\n\n$/);
  });

  it('Ollama: an error line after the text, never done:true', () => {
    const t = ollamaGeneration({ kind: 'chat', model: 'm', stream: true, upstream: 'chat', startedAt: 0, leasedAt: 0, now: () => 0 });
    const out = t.chunk(Buffer.from(TOKEN)) + t.chunk(Buffer.from(NEWER)) + t.end();
    const lines = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { message?: { content: string }; error?: string; done?: boolean });
    assert.equal(lines[0]!.message?.content, 'Hi');
    assert.match(String(lines.at(-1)!.error), /does not match the expected format/);
    assert.ok(!lines.some((l) => l.done === true), 'no line says the answer is complete');
  });
});
