import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkImages, imageSources, isLocalAddress } from '../../src/main/core/hub/proxy/images.js';
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

describe('local addresses (a fetched image link may not redirect into them)', () => {
  it('loopback, RFC 1918, CGNAT, link-local, ULA and unspecified are local; public addresses are not', () => {
    const local = [
      '127.0.0.1',
      '127.0.0.2',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.1.1',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      '::',
      'fd00::1',
      'fe80::1',
      '::ffff:192.168.0.10',
    ];
    const open = ['8.8.8.8', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '1.1.1.1'];
    assert.deepEqual(
      local.filter((a) => !isLocalAddress(a)),
      [],
    );
    assert.deepEqual(open.filter(isLocalAddress), []);
  });
});
