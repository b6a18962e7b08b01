import { lookup } from 'node:dns/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP } from 'node:net';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * An image link fetched for a client (RELAY_FETCH_IMAGES=1: the owner lets the hub fetch what clients link). Each
 * hop's host is looked up once, and the connection goes to the very address looked up (pinned), so a name whose
 * answer changes between the check and the connection (DNS rebinding) cannot slip a redirect into the home network:
 * a redirect is followed to the same site, or to a host whose every address is public.
 */

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

/** One hop's answer: its status, headers (lower-case names) and body. */
export interface HopAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly body: AsyncIterable<Uint8Array> & { destroy(): void };
}

/** How the hub reaches the network for an image: names looked up, and a GET sent to one address (the tests' own, or the system's). */
export interface ImageNet {
  resolve(host: string): Promise<string[]>;
  get(url: URL, address: string, signal: AbortSignal): Promise<HopAnswer>;
}

/** A GET of `url` on a connection to `address` (the name in `url` goes only into the Host header and TLS's SNI). */
function pinnedGet(url: URL, address: string, signal: AbortSignal): Promise<HopAnswer> {
  const family = isIP(address);
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    // Node asks for every address (`all`, to race them) or for one: either way it gets the pinned one.
    const pinned = (_host: string, opts: { all?: boolean }, cb: (...a: unknown[]) => void): void => (opts.all ? cb(null, [{ address, family }]) : cb(null, address, family));
    const req = request(url, { method: 'GET', signal, lookup: pinned as never }, (res: IncomingMessage) =>
      resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string | undefined>, body: res }),
    );
    req.on('error', reject);
    req.end();
  });
}

export const SYSTEM_NET: ImageNet = {
  resolve: async (host) => (isIP(host) ? [host] : (await lookup(host, { all: true }).catch(() => [])).map((a) => a.address)),
  get: pinnedGet,
};

/** One image link fetched: its media type and bytes, bounded in size and time. */
export async function fetchImage(url: string, maxBytes: number, net: ImageNet = SYSTEM_NET, timeoutMs = FETCH_TIMEOUT_MS): Promise<{ type: string; data: Buffer }> {
  const failed = (why: string): RelayError => new RelayError(ErrorCode.IMAGE_FETCH_FAILED, `could not fetch the image at ${url.slice(0, 200)}: ${why}`, { url: url.slice(0, 200) });
  const signal = AbortSignal.timeout(timeoutMs);
  let res: HopAnswer;
  try {
    let at = new URL(url);
    /** Each host's addresses as first looked up: every hop to it goes there. */
    const resolved = new Map<string, string[]>();
    const addressesOf = async (u: URL): Promise<string[]> => {
      const host = u.hostname.replace(/^\[|\]$/g, '');
      let a = resolved.get(host);
      if (!a) resolved.set(host, (a = await net.resolve(host)));
      return a;
    };
    for (let hop = 0; ; hop++) {
      if (at.protocol !== 'http:' && at.protocol !== 'https:') throw failed(`${at.protocol} is not a web address`);
      const addresses = await addressesOf(at);
      if (addresses.length === 0) throw failed(`${at.hostname} has no address`);
      res = await net.get(at, addresses[0]!, signal);
      const location = res.headers.location;
      if (res.status < 300 || res.status >= 400 || !location) break;
      res.body.destroy();
      const next = new URL(location, at);
      if (hop === MAX_REDIRECTS) throw failed(`more than ${MAX_REDIRECTS} redirects`);
      if (next.origin !== at.origin && (await addressesOf(next)).some(isLocalAddress)) {
        throw failed(`it redirects to ${next.host}, an address of the local network (a redirect is followed to the same site or to public addresses only)`);
      }
      at = next;
    }
  } catch (err) {
    if (err instanceof RelayError) throw err;
    throw failed((err as Error).name === 'TimeoutError' || signal.aborted ? `no answer within ${timeoutMs / 1000} s` : (err as Error).message);
  }
  if (res.status < 200 || res.status >= 300) {
    res.body.destroy();
    throw failed(`it answered ${res.status}`);
  }
  const type = (res.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (!type.startsWith('image/')) {
    res.body.destroy();
    throw failed(`it is ${type || 'of no stated type'}, not an image`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of res.body) {
    size += c.byteLength;
    if (size > maxBytes) {
      res.body.destroy();
      throw failed(`it is over ${Math.round(maxBytes / 2 ** 20)} MiB`);
    }
    chunks.push(Buffer.from(c));
  }
  return { type, data: Buffer.concat(chunks) };
}
