import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { httpError } from '../../src/shared/errors.js';
import { llamaRefusal } from '../../src/main/core/hub/proxy/llama-answer.js';

/**
 * Whose fault an error answer is: llama-server's own refusal of a request (bad parameters, a prompt over the
 * context, an image for a text-only model) goes to the client with its message under a stable code, and
 * nothing is retried; anything else in an error status is the placement's failure (the caller tries another).
 * The bodies are llama-server's own (tools/server/server-common.cpp, format_error_response), seen from v0.4.0.
 */
describe("llama-server's refusals (pure)", () => {
  const refused = (status: number, body: string) => {
    const e = llamaRefusal(status, body);
    return e ? { ...httpError(e).body.error, status: httpError(e).status } : null;
  };

  it('maps each of its error types to a stable code, keeping its status and message', () => {
    assert.deepEqual(refused(400, '{"error":{"code":400,"message":"Failed to initialize samplers: failed to parse grammar","type":"invalid_request_error"}}'), {
      code: 'invalid_request',
      message: 'Failed to initialize samplers: failed to parse grammar',
      type: 'invalid_request_error',
      status: 400,
    });
    assert.deepEqual(
      refused(
        400,
        '{"error":{"code":400,"message":"request (402 tokens) exceeds the available context size (256 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":402,"n_ctx":256}}',
      ),
      {
        code: 'context_length_exceeded',
        message: 'request (402 tokens) exceeds the available context size (256 tokens), try increasing it',
        type: 'invalid_request_error',
        details: { n_prompt_tokens: 402, n_ctx: 256 },
        status: 400,
      },
    );
    assert.deepEqual(refused(500, '{"error":{"code":500,"message":"image input is not supported - hint: if this is unexpected, you may need to provide the mmproj","type":"server_error"}}'), {
      code: 'llama_server_error',
      message: 'image input is not supported - hint: if this is unexpected, you may need to provide the mmproj',
      type: 'server_error',
      status: 500,
    });
    assert.equal(refused(501, '{"error":{"code":501,"message":"This server does not support embeddings.","type":"not_supported_error"}}')?.code, 'not_supported');
    assert.equal(refused(404, '{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}')?.code, 'not_found');
  });

  it("is not one when it is the placement's trouble: a 503 while loading, no JSON, no message", () => {
    assert.equal(refused(503, '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'), null);
    assert.equal(refused(502, '<html>Bad Gateway</html>'), null);
    assert.equal(refused(500, '{"error":"boom"}'), null);
    assert.equal(refused(500, ''), null);
  });
});
