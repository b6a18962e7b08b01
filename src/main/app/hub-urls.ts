import { networkInterfaces } from 'node:os';
import type { Logger } from 'pino';
import { beyondLoopback, lanAddresses } from '../core/hub/http/guard.js';
import type { NodeSettings } from '../core/node/link/settings.js';
import { requestDashboardLink } from '../core/node/link/hub-client.js';

/** The addresses the tray app shows and opens for a hub. */

/** The hub's URL as other machines reach it: its first non-internal IPv4 address when it listens on every interface. */
export function lanUrl(url: string, listen: string, interfaces = networkInterfaces()): string {
  if (!beyondLoopback(listen)) return loopbackUrl(url);
  const addr = lanAddresses(interfaces)[0];
  return addr ? url.replace(/^(https?:\/\/)[^/:]+|^(https?:\/\/)\[[^\]]+\]/, (_m, a: string | undefined, b: string | undefined) => `${a ?? b}${addr}`) : loopbackUrl(url);
}

/** A hub listening on every interface is opened from this machine through loopback. */
export function loopbackUrl(url: string): string {
  return url.replace(/^(https?:\/\/)(0\.0\.0\.0|\[::\])(?=:)/, '$1127.0.0.1');
}

/**
 * What "Open dashboard" opens. The hub's own tray (`node` null): its dashboard (a loopback client is its
 * admin). A node's tray: the hub is another machine, whose dashboard wants a login, so the node asks the hub
 * (with its credential, over pinned TLS) for a one-time read-only link; if that fails the plain URL opens and
 * the page says how to log in.
 */
export async function dashboardOpenUrl(url: string, node: NodeSettings | null, log: Logger): Promise<string> {
  if (!node) return url;
  try {
    return (await requestDashboardLink(node)).url;
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'no dashboard login link from the hub: opening its plain URL');
    return url;
  }
}
