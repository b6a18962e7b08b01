import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkImages, imageSources } from '../../src/main/core/hub/images.js';
import { isRelayError } from '../../src/shared/errors.js';

const data = 'data:image/png;base64,iVBORw0KGgo=';

function code(fn: () => void): string | null {
  try {
    fn();
    return null;
  } catch (err) {
    assert.ok(isRelayError(err));
    return err.code;
  }
}

describe('images in a request, every dialect', () => {
  it("finds OpenAI's image_url parts, the Responses API's input_image, Anthropic's image blocks; inline or remote", () => {
    const chat = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'x' },
            { type: 'image_url', image_url: { url: data } },
            { type: 'image_url', image_url: 'https://example.com/a.png' },
          ],
        },
      ],
    };
    assert.deepEqual(imageSources(chat), ['data', 'https://example.com/a.png']);
    const responses = { input: [{ role: 'user', content: [{ type: 'input_image', image_url: data }] }] };
    assert.deepEqual(imageSources(responses), ['data']);
    const messages = {
      system: [{ type: 'text', text: 's' }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBO' } },
            { type: 'image', source: { type: 'url', url: 'http://10.0.0.1/x.jpg' } },
          ],
        },
      ],
    };
    assert.deepEqual(imageSources(messages), ['data', 'http://10.0.0.1/x.jpg']);
    assert.deepEqual(imageSources({ messages: [{ role: 'user', content: 'no images' }], tools: [{ type: 'function', function: { parameters: { type: 'object' } } }] }), []);
  });

  it('a text-only model refuses any image; a vision model refuses remote ones only', () => {
    const one = { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: data } }] }] };
    const remote = { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }] };
    assert.equal(
      code(() => checkImages(one, { name: 'm' })),
      'MODEL_NOT_VISION',
    );
    assert.equal(
      code(() => checkImages(one, { name: 'eyes', mmproj: {} })),
      null,
    );
    assert.equal(
      code(() => checkImages(remote, { name: 'eyes', mmproj: {} })),
      'IMAGE_URL_NOT_ALLOWED',
    );
    assert.equal(
      code(() => checkImages({ messages: [] }, { name: 'm' })),
      null,
    );
  });
});
