import { ErrorCode, RelayError } from '../../../shared/errors.js';

/**
 * Images in a generation request, whatever its dialect — OpenAI's `image_url` parts (chat; Ollama's `images`
 * arrive as these), the Responses API's `input_image`, Anthropic's `image` blocks — pure. A model without a vision
 * projector refuses them before anything is placed for it, and an image given as a remote URL is refused: the hub
 * fetching any address a client names, from inside the home network, is a request forger's tool (SSRF).
 */

const IMAGE_PARTS = new Set(['image_url', 'input_image', 'image']);

/** Where each image of `body` comes from: 'data' (inline bytes) or the remote URL it names. */
export function imageSources(body: unknown): string[] {
  const out: string[] = [];
  const visit = (v: unknown, depth: number): void => {
    if (depth > 12 || typeof v !== 'object' || v === null) return;
    if (Array.isArray(v)) {
      for (const x of v) visit(x, depth + 1);
      return;
    }
    const o = v as Record<string, unknown>;
    if (typeof o.type === 'string' && IMAGE_PARTS.has(o.type)) out.push(sourceOf(o));
    for (const k of ['messages', 'input', 'content', 'system']) if (k in o) visit(o[k], depth + 1);
  };
  visit(body, 0);
  return out;
}

function sourceOf(part: Record<string, unknown>): string {
  const iu = part.image_url;
  const url = typeof iu === 'string' ? iu : typeof iu === 'object' && iu !== null ? (iu as { url?: unknown }).url : undefined;
  const src = part.source as { type?: unknown; url?: unknown } | undefined; // Anthropic: {type: "base64" | "url", …}
  const remote = typeof url === 'string' ? url : src?.type === 'url' && typeof src.url === 'string' ? src.url : '';
  return /^https?:/i.test(remote) ? remote : 'data';
}

/** Refuses what `model` cannot take: any image without a projector, and images given as remote URLs. */
export function checkImages(body: unknown, model: { name: string; mmproj?: unknown }): void {
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
  if (remote) {
    throw new RelayError(ErrorCode.IMAGE_URL_NOT_ALLOWED, `images must be sent inline (a data: URL or base64), not as a link the hub would fetch: ${remote.slice(0, 200)}`, { model: model.name });
  }
}
