import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkImages, imageSources } from '../../src/main/core/hub/proxy/images.js';
import { fetchImage, isLocalAddress, SYSTEM_NET, type ImageNet } from '../../src/main/core/hub/proxy/image-fetch.js';
import { createServer } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
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

describe('an image link fetched with the address it was checked at (image-fetch.ts)', () => {
  /** A network of the test's own: names answer in turn (a DNS that changes its answer), GETs are recorded. */
  function net(answers: Record<string, string[][]>, pages: Record<string, { status: number; headers: Record<string, string>; body?: Buffer }>) {
    const asked: string[] = [];
    const got: { url: string; address: string }[] = [];
    const n: ImageNet = {
      resolve: async (host) => {
        asked.push(host);
        return answers[host]?.shift() ?? [];
      },
      get: async (url, address) => {
        got.push({ url: url.href, address });
        const p = pages[`${address} ${url.pathname}`] ?? { status: 404, headers: {} };
        const body = Object.assign(
          (async function* () {
            if (p.body) yield new Uint8Array(p.body);
          })(),
          { destroy: () => undefined },
        );
        return { status: p.status, headers: p.headers, body };
      },
    };
    return { n, asked, got };
  }
  const PNG = Buffer.from('89504e470d0a1a0a', 'hex');

  it('a name that answers a public address when checked and a local one after is never reached at the local one', async () => {
    const { n, asked, got } = net(
      { 'pics.example': [['93.184.216.34']], 'rebind.example': [['203.0.113.7'], ['127.0.0.1']] },
      {
        '93.184.216.34 /cat.png': { status: 302, headers: { location: 'http://rebind.example/cat.png' } },
        '203.0.113.7 /cat.png': { status: 200, headers: { 'content-type': 'image/png' }, body: PNG },
        '127.0.0.1 /cat.png': { status: 200, headers: { 'content-type': 'image/png' }, body: Buffer.from('the router') },
      },
    );
    const img = await fetchImage('http://pics.example/cat.png', 1 << 20, n);
    assert.deepEqual(img, { type: 'image/png', data: PNG });
    assert.deepEqual(asked, ['pics.example', 'rebind.example'], 'each name looked up once');
    assert.deepEqual(
      got.map((g) => g.address),
      ['93.184.216.34', '203.0.113.7'],
      'the connection goes to the address that was checked',
    );
  });

  it('a redirect to a name with any local address is refused before a byte is sent to it', async () => {
    const { n, got } = net(
      { 'pics.example': [['93.184.216.34']], 'mixed.example': [['203.0.113.7', '192.168.1.1']] },
      { '93.184.216.34 /cat.png': { status: 302, headers: { location: 'http://mixed.example/admin' } } },
    );
    await assert.rejects(fetchImage('http://pics.example/cat.png', 1 << 20, n), /redirects to mixed\.example, an address of the local network/);
    assert.equal(got.length, 1);
  });

  it('the system network connects to the pinned address whatever the name says (a name nobody resolves here)', async () => {
    const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'image/png' }).end(PNG));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const port = (server.address() as AddressInfo).port;
      const res = await SYSTEM_NET.get(new URL(`http://no-such-host.invalid:${port}/x.png`), '127.0.0.1', AbortSignal.timeout(5000));
      const chunks: Uint8Array[] = [];
      for await (const c of res.body) chunks.push(c);
      assert.deepEqual([res.status, Buffer.concat(chunks)], [200, PNG]);
    } finally {
      server.close();
    }
  });
});
