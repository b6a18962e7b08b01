import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { fetchImage, SYSTEM_NET, type ImageNet } from './image-fetch.js';

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

/**
 * With RELAY_FETCH_IMAGES: the body with every image link replaced by the fetched image, inline, in its dialect's
 * shape (OpenAI's data: URL, Anthropic's base64 source); null when it has none.
 */
export async function inlineRemoteImages(body: Record<string, unknown>, maxBytes: number, net: ImageNet = SYSTEM_NET): Promise<Record<string, unknown> | null> {
  if (!imageSources(body).some((src) => src !== 'data')) return null;
  const copy = structuredClone(body);
  await Promise.all(
    imageParts(copy).map(async (part) => {
      const url = sourceOf(part);
      if (url === 'data') return;
      const img = await fetchImage(url, maxBytes, net);
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
