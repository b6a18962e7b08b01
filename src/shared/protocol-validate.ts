/**
 * Validation of the hub ↔ node wire (protocol.ts): pure, small, explicit. Every control message and stream
 * header is checked here before anything acts on it.
 */
import { PROTOCOL_VERSION, type HubToNode, type NodeToHub, type StreamHeader } from './protocol.js';

type Check = (v: unknown) => boolean;
const isStr: Check = (v) => typeof v === 'string';
const isNullableStr: Check = (v) => v === null || typeof v === 'string';
const isInt: Check = (v) => Number.isInteger(v) && (v as number) >= 0;
const isNum: Check = (v) => typeof v === 'number' && Number.isFinite(v) && v >= 0;
const isBool: Check = (v) => typeof v === 'boolean';
const optional =
  (c: Check): Check =>
  (v) =>
    v === undefined || c(v);
const isSha: Check = (v) => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
const isId: Check = (v) => typeof v === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(v);
const oneOf =
  (...xs: unknown[]): Check =>
  (v) =>
    xs.includes(v);
const arrayOf =
  (c: Check, max = 10_000): Check =>
  (v) =>
    Array.isArray(v) && v.length <= max && v.every(c);
const shape =
  (fields: Record<string, Check>): Check =>
  (v) =>
    typeof v === 'object' && v !== null && !Array.isArray(v) && Object.entries(fields).every(([k, c]) => c((v as Record<string, unknown>)[k]));

const device = shape({ id: isId, kind: oneOf('gpu', 'cpu'), description: isStr, totalMb: isNum, freeMb: isNum, ageMs: optional(isNum), memGBps: optional(isNum) });
const cached = shape({ sha256: isSha, size: isInt });
const running = shape({ replica: isId, sha256: isSha, pid: (v) => v === null || isInt(v), state: optional(oneOf('loading', 'ready')) });
const runningRpc = shape({ rpc: isId, pid: (v) => v === null || isInt(v) });
const availability = oneOf('idle', 'busy', 'paused');

const helloBody = shape({
  devices: arrayOf(device, 64),
  cache: arrayOf(cached),
  partials: arrayOf(cached),
  replicas: arrayOf(running, 256),
  rpcs: optional(arrayOf(runningRpc, 256)),
  availability,
  reason: isNullableStr,
  schedule: optional(isStr),
});

/** What every version's hello carries: enough for the hub to refuse a node of another version by name (pool/versions.ts). */
const shortStr =
  (max: number): Check =>
  (v) =>
    typeof v === 'string' && v.length <= max;
const helloHead = shape({ protocol: isInt, node: isId, llama: shortStr(512), relay: optional(shortStr(64)) });

const SCHEMAS: Record<string, Check> = {
  hello: (v) => helloHead(v) && ((v as { protocol: number }).protocol !== PROTOCOL_VERSION || helloBody(v)),
  heartbeat: shape({
    devices: arrayOf(device, 64),
    availability,
    reason: isNullableStr,
    replicas: arrayOf(running, 256),
    rpcs: optional(arrayOf(runningRpc, 256)),
    cache: arrayOf(cached),
    schedule: optional(isStr),
  }),
  availability: shape({ availability, reason: isNullableStr }),
  reply: shape({ id: isInt, ok: isBool }),
  error: shape({ code: isStr, message: isStr }),
  welcome: shape({ protocol: isInt, hub: isStr }),
  'start-replica': shape({
    id: isInt,
    replica: isId,
    sha256: isSha,
    parts: optional((v) => Array.isArray(v) && v.length >= 2 && v.length <= 256 && v.every(isSha)),
    ctx: isInt,
    slots: isInt,
    cacheType: oneOf('f16', 'q8_0', 'q4_0'),
    flashAttn: oneOf('on', 'off', 'auto', null),
    embedding: isBool,
    reranking: optional(isBool),
    mmproj: optional(isSha),
    draft: optional(shape({ sha256: isSha, max: isInt, min: isInt })),
    pooling: oneOf('mean', null),
    nPredict: optional(isInt),
    specType: optional(oneOf('draft-mtp', 'ngram-simple', 'ngram-map-k', 'ngram-map-k4v', 'ngram-mod', 'ngram-cache')),
    alias: isId,
    device: isId,
    loadTimeoutMs: optional(isInt),
    keepSlotsBytes: optional(isInt),
    slotBytesPerToken: optional(isInt),
  }),
  'stop-replica': shape({ id: isInt, replica: isId }),
  'start-rpc': shape({
    id: isInt,
    rpc: isId,
    cache: isBool,
    device: optional(isId),
    stage: optional(shape({ model: isId, index: isInt, of: isInt, layers: (v) => Array.isArray(v) && v.length === 2 && v.every(isInt) })),
  }),
  'stop-rpc': shape({ id: isInt, rpc: isId }),
  evict: shape({ id: isInt, sha256: isSha }),
  'push-begin': shape({ id: isInt, sha256: isSha, size: isInt, siblings: optional((v) => Array.isArray(v) && v.length <= 256 && v.every(isSha)) }),
  'fill-rpc-cache': shape({
    id: isInt,
    sha256: isSha,
    layers: optional((v) => Array.isArray(v) && v.length === 2 && v.every(isInt)),
    siblings: optional((v) => Array.isArray(v) && v.length <= 256 && v.every(isSha)),
  }),
  'rpc-loaded': shape({ id: isInt, rpc: isId, sha256: isSha, weights: optional(arrayOf(shape({ name: (v) => typeof v === 'string' && /^[0-9a-f]{16}$/.test(v), size: isInt }), 100_000)) }),
  'set-paused': shape({ id: isInt, paused: isBool }),
  check: shape({ id: isInt, replica: optional(isId), rpc: optional(isId) }),
};

const FROM_NODE = new Set(['hello', 'heartbeat', 'availability', 'reply', 'error']);
const FROM_HUB = new Set(['welcome', 'error', 'start-replica', 'stop-replica', 'start-rpc', 'stop-rpc', 'evict', 'push-begin', 'fill-rpc-cache', 'rpc-loaded', 'set-paused', 'check']);

export type Parsed<T> = { ok: true; msg: T } | { ok: false; code: 'bad_json' | 'bad_message' | 'unknown_type'; message: string };

function parse<T>(line: string, allowed: Set<string>): Parsed<T> {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return { ok: false, code: 'bad_json', message: `not JSON: ${line.slice(0, 80)}` };
  }
  const type = typeof v === 'object' && v !== null ? (v as { type?: unknown }).type : undefined;
  if (typeof type !== 'string') return { ok: false, code: 'bad_message', message: 'a message needs a string "type"' };
  if (!allowed.has(type)) return { ok: false, code: 'unknown_type', message: `unknown message type "${type.slice(0, 40)}"` };
  if (!SCHEMAS[type]!(v)) return { ok: false, code: 'bad_message', message: `malformed "${type}" message` };
  return { ok: true, msg: v as T };
}

export const parseNodeMessage = (line: string): Parsed<NodeToHub> => parse<NodeToHub>(line, FROM_NODE);
export const parseHubMessage = (line: string): Parsed<HubToNode> => parse<HubToNode>(line, FROM_HUB);

export function parseStreamHeader(line: string): StreamHeader | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  const h = v as Record<string, unknown>;
  if (typeof v !== 'object' || v === null) return null;
  switch (h.kind) {
    case 'control':
      return { kind: 'control' };
    case 'http':
      return isId(h.replica) ? { kind: 'http', replica: h.replica as string } : null;
    case 'rpc':
      return isId(h.rpc) ? { kind: 'rpc', rpc: h.rpc as string } : null;
    case 'file':
      return isSha(h.sha256) && isInt(h.offset) && isInt(h.size) && (h.offset as number) <= (h.size as number)
        ? { kind: 'file', sha256: h.sha256 as string, offset: h.offset as number, size: h.size as number }
        : null;
    case 'slot':
      if (h.op === 'tokens') return isId(h.replica) && isInt(h.busy) && (h.busy as number) <= 255 ? { kind: 'slot', op: 'tokens', replica: h.replica as string, busy: h.busy as number } : null;
      if (!isId(h.replica) || !isInt(h.slot) || (h.slot as number) > 255) return null;
      if (h.op === 'get') return { kind: 'slot', op: 'get', replica: h.replica as string, slot: h.slot as number };
      return h.op === 'put' && isInt(h.size) && isSha(h.sha256)
        ? { kind: 'slot', op: 'put', replica: h.replica as string, slot: h.slot as number, size: h.size as number, sha256: h.sha256 as string }
        : null;
    default:
      return null;
  }
}
