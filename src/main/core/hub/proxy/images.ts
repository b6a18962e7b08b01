import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * Images in a generation request, whatever its dialect — OpenAI's `image_url` parts (chat; Ollama's `images`
 * arrive as these), the Responses API's `input_image`, Anthropic's `image` blocks — pure. A model without a vision
 * projector refuses them before anything is placed for it, and an image given as a remote URL is refused: the hub
 * fetching any address a client names, from inside the home network, is a request forger's tool (SSRF).
 */

const IMAGE_PARTS = new Set(['image_url', 'input_image', 'image']);

/** The image parts of a request body, whatever its dialect (the objects themselves, to read or to rewrite). */
function imageParts(body: unknown): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  const visit = (v: unknown, depth: number): void => {
    if (depth > 12 || typeof v !== 'object' || v === null) return;
    if (Array.isArray(v)) return v.forEach((x) => visit(x, depth + 1));
    const o = v as Record<string, unknown>;
    if (typeof o.type === 'string' && IMAGE_PARTS.has(o.type)) out.push(o);
    for (const k of ['messages', 'input', 'content', 'system']) if (k in o) visit(o[k], depth + 1);
  };
  visit(body, 0);
  return out;
}

/** Where each image of `body` comes from: 'data' (inline bytes) or the remote URL it names. */
export function imageSources(body: unknown): string[] {
  return imageParts(body).map(sourceOf);
}

function sourceOf(part: Record<string, unknown>): string {
  const iu = part.image_url;
  const url = typeof iu === 'string' ? iu : typeof iu === 'object' && iu !== null ? (iu as { url?: unknown }).url : undefined;
  const src = part.source as { type?: unknown; url?: unknown } | undefined; // Anthropic: {type: "base64" | "url", …}
  const remote = typeof url === 'string' ? url : src?.type === 'url' && typeof src.url === 'string' ? src.url : '';
  return /^https?:/i.test(remote) ? remote : 'data';
}

/** Refuses what `model` cannot take: any image without a projector, and (unless `fetching`) images given as remote URLs. */
export function checkImages(body: unknown, model: { name: string; mmproj?: unknown }, fetching = false): void {
  const sources = imageSources(body);
  if (sources.length === 0) return;
  if (!model.mmproj) {
    throw new RelayError(
      ErrorCode.MODEL_NOT_VISION,
      `"${model.name}" is a text-only model: it has no vision projector for the image${sources.length > 1 ? 's' : ''} in this request (relay models add FILE --name ${model.name} --mmproj PROJECTOR)`,
      { model: model.name },
    );
  }
  const remote = sources.find((s) => s !== 'data');
  if (remote && !fetching) {
    throw new RelayError(
      ErrorCode.IMAGE_URL_NOT_ALLOWED,
      `images must be sent inline (a data: URL or base64), not as a link the hub would fetch (its owner can allow that: RELAY_FETCH_IMAGES=1): ${remote.slice(0, 200)}`,
      { model: model.name },
    );
  }
}

const FETCH_TIMEOUT_MS = 15_000;
const MAX_REDIRECTS = 5;

/** Loopback, private (RFC 1918, CGNAT, ULA), link-local or unspecified: the home network's or this machine's. */
const LOCAL = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
] as const)
  LOCAL.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
] as const)
  LOCAL.addSubnet(net, bits, 'ipv6');

/** Whether `ip` is such an address, in any spelling (an IPv4-mapped IPv6 one `::ffff:7f00:1` included: BlockList maps them). */
export function isLocalAddress(ip: string): boolean {
  const family = isIP(ip);
  return family !== 0 && LOCAL.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * Where a link redirects, if relay may follow: to the same origin, or to a host whose every address is public. A
 * client that may name a public image must not be able to reach the home network's devices through a redirect.
 */
async function redirectAllowed(from: URL, to: URL): Promise<boolean> {
  if (to.protocol !== 'http:' && to.protocol !== 'https:') return false;
  if (to.origin === from.origin) return true;
  const host = to.hostname.replace(/^\[|\]$/g, '');
  const addresses = isIP(host) ? [host] : (await lookup(host, { all: true }).catch(() => [])).map((a) => a.address);
  return addresses.length > 0 && !addresses.some(isLocalAddress);
}

/** One image link fetched: its media type and bytes, bounded in size and time. */
async function fetchImage(url: string, maxBytes: number): Promise<{ type: string; data: Buffer }> {
  const failed = (why: string): RelayError => new RelayError(ErrorCode.IMAGE_FETCH_FAILED, `could not fetch the image at ${url.slice(0, 200)}: ${why}`, { url: url.slice(0, 200) });
  let res: Response;
  const signal = AbortSignal.timeout(FETCH_TIMEOUT_MS);
  try {
    let at = new URL(url);
    for (let hop = 0; ; hop++) {
      res = await fetch(at, { signal, redirect: 'manual' });
      const location = res.headers.get('location');
      if (res.status < 300 || res.status >= 400 || !location) break;
      await res.body?.cancel();
      const next = new URL(location, at);
      if (hop === MAX_REDIRECTS) throw failed(`more than ${MAX_REDIRECTS} redirects`);
      if (!(await redirectAllowed(at, next))) throw failed(`it redirects to ${next.host}, an address of the local network (a redirect is followed to the same site or to public addresses only)`);
      at = next;
    }
  } catch (err) {
    if (err instanceof RelayError) throw err;
    throw failed((err as Error).name === 'TimeoutError' ? `no answer within ${FETCH_TIMEOUT_MS / 1000} s` : (err as Error).message);
  }
  if (!res.ok) throw failed(`it answered ${res.status}`);
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (!type.startsWith('image/')) throw failed(`it is ${type || 'of no stated type'}, not an image`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of res.body ?? []) {
    size += (c as Uint8Array).byteLength;
    if (size > maxBytes) throw failed(`it is over ${Math.round(maxBytes / 2 ** 20)} MiB`);
    chunks.push(Buffer.from(c as Uint8Array));
  }
  return { type, data: Buffer.concat(chunks) };
}

/**
 * With RELAY_FETCH_IMAGES: the body with every image link replaced by the fetched image, inline, in its dialect's
 * shape (OpenAI's data: URL, Anthropic's base64 source); null when it has none.
 */
export async function inlineRemoteImages(body: Record<string, unknown>, maxBytes: number): Promise<Record<string, unknown> | null> {
  if (!imageSources(body).some((src) => src !== 'data')) return null;
  const copy = structuredClone(body);
  await Promise.all(
    imageParts(copy).map(async (part) => {
      const url = sourceOf(part);
      if (url === 'data') return;
      const img = await fetchImage(url, maxBytes);
      const data = img.data.toString('base64');
      const dataUrl = `data:${img.type};base64,${data}`;
      // Anthropic's source; the Responses API's image_url string; OpenAI chat's image_url object.
      if (part.type === 'image') part.source = { type: 'base64', media_type: img.type, data };
      else if (typeof part.image_url === 'string') part.image_url = dataUrl;
      else part.image_url = { ...(part.image_url as object), url: dataUrl };
    }),
  );
  return copy;
}
