import { UsageError } from './usage.js';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ModelCache, type CacheBudget } from '../core/node/cache/cache.js';
import { cacheReport, type CacheReport } from '../core/node/cache/cache-report.js';
import { readSettings } from '../core/node/link/settings.js';

/**
 * `relay cache ls|prune` on a node: what the weights cache holds and freeing it. With the node running the
 * command asks its agent (which knows what is in use and what is being pushed); with it stopped it reads and
 * prunes the folder itself.
 */

/** `--cache-budget-mb`: a number of MiB (0: no cap) or `auto`. */
export function cacheBudgetFlag(v: string | undefined): CacheBudget | undefined {
  if (v === undefined) return undefined;
  if (v === 'auto') return 'auto';
  const n = v.trim() === '' ? NaN : Number(v);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`--cache-budget-mb must be a whole number of MiB (0: no cap) or "auto", got "${v}"`);
  return n;
}

/** Sizes as `relay models ls` prints them (MB = MiB, as everywhere in relay). */
const mb = (bytes: number): string => (bytes >= 10 * 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GB` : `${(bytes / 2 ** 20).toFixed(1)} MB`);

/** The running agent's local API, or null when the node is not running. */
async function agentApi(home: string, path: string, method: string): Promise<unknown> {
  const p = join(home, 'agent.json');
  if (!existsSync(p)) return null;
  const { port, token } = JSON.parse(readFileSync(p, 'utf8')) as { port: number; token: string };
  let res: Response;
  try {
    res = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
  } catch {
    return null; // agent.json left by a node that stopped: work on the folder itself
  }
  // A running node that refuses is an error, never a reason to touch its files behind its back.
  if (!res.ok) throw new Error(`the node running in ${home} answered ${res.status}: ${await res.text()}`);
  return res.json();
}

function offlineCache(home: string): ModelCache {
  const s = readSettings(home);
  if (!s && !existsSync(join(home, 'cache'))) throw new Error(`no node in ${home} (join one with relay up)`);
  const budget = s?.cacheBudgetMb ?? 'auto';
  return new ModelCache(join(home, 'cache'), budget === 'auto' ? 'auto' : budget * 1024 * 1024);
}

export function cacheLines(r: CacheReport): string[] {
  const setting = r.budget.setting === 'auto' ? 'auto (half of the free disk and the cache)' : r.budget.setting === 0 ? 'no cap' : mb(r.budget.setting);
  const lines = [`cache   ${r.dir}`, `used    ${mb(r.used_bytes)} of ${r.budget.bytes > 0 ? mb(r.budget.bytes) : 'no cap'}; budget ${setting}; disk free ${mb(r.disk_free_bytes)}`];
  if (r.files.length === 0) lines.push('no models cached');
  else {
    lines.push('', 'SHA256        SIZE       LAST USED                 IN USE');
    for (const f of r.files) lines.push(`${f.sha256.slice(0, 12)}  ${mb(f.size).padStart(9)}  ${f.last_used.padEnd(24)}  ${f.in_use ? 'yes' : ''}`);
  }
  for (const p of r.partials) lines.push(`partial push ${p.sha256.slice(0, 12)}… ${mb(p.size)}`);
  if (r.rpc_cache_bytes > 0) lines.push(`ggml-rpc-server tensor cache ${mb(r.rpc_cache_bytes)}`);
  return lines;
}

export async function cmdCache(sub: string | undefined, args: string[], home: (v: string | undefined) => string): Promise<number> {
  const { values } = parseArgs({ args, options: { home: { type: 'string' }, json: { type: 'boolean' } } });
  const dir = home(values.home);
  if (sub === 'ls') {
    const r = ((await agentApi(dir, '/cache', 'GET')) as CacheReport | null) ?? cacheReport(offlineCache(dir));
    if (values.json) console.log(JSON.stringify(r, null, 2));
    else for (const l of cacheLines(r)) console.log(l);
    return 0;
  }
  if (sub === 'prune') {
    type Pruned = ReturnType<ModelCache['prune']>;
    const r = ((await agentApi(dir, '/cache/prune', 'POST')) as Pruned | null) ?? offlineCache(dir).prune();
    if (values.json) console.log(JSON.stringify(r, null, 2));
    else {
      const freed = [...r.removed, ...r.partials].reduce((s, f) => s + f.size, 0);
      console.log(`removed ${r.removed.length} model file(s) and ${r.partials.length} partial push(es): ${mb(freed)} freed`);
      for (const k of r.kept) console.log(`kept ${k.sha256.slice(0, 12)}… ${mb(k.size)} (${k.why})`);
    }
    return 0;
  }
  throw new UsageError(sub === undefined ? 'say ls or prune' : `no cache command "${sub}"`);
}
