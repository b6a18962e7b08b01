import { UsageError } from './usage.js';
import { parseArgs } from 'node:util';
import { api, apiFailure, hubUrl } from './api.js';

/** `relay keys …` (API keys for /v1) and `relay dashboard [--link]` (the page, or a login link for another machine). */
export async function cmdKeys(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { hub: { type: 'string' }, json: { type: 'boolean' } } });
  const base = hubUrl(values.hub);
  if (sub === 'create' && positionals[0]) {
    const res = await api(base, '/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: positionals[0] }) });
    const j = (await res.json()) as { name: string; key: string; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.error(`API key "${j.name}" (shown once; the hub keeps only its SHA-256). Use it as the bearer key for ${base}/v1:`);
    console.log(j.key);
    return 0;
  }
  if (sub === 'ls') {
    const res = await api(base, '/api/keys');
    const j = (await res.json()) as { keys: { name: string; prefix: string; created_at: string; last_used_at: string | null }[]; required: boolean; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    if (values.json) console.log(JSON.stringify(j, null, 2));
    else {
      console.log(`/v1 ${j.required ? 'requires' : 'does not require'} a key`);
      for (const k of j.keys) console.log(`${k.name.padEnd(24)} ${k.prefix}…  made ${k.created_at}  last used ${k.last_used_at ?? 'never'}`);
    }
    return 0;
  }
  if ((sub === 'revoke' || sub === 'rm') && positionals[0]) {
    const res = await api(base, `/api/keys/${encodeURIComponent(positionals[0])}`, { method: 'DELETE' });
    const j = (await res.json()) as { error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`revoked: ${positionals[0]}`);
    return 0;
  }
  throw new UsageError(sub === undefined ? 'say what to do with keys' : `"${sub}" needs a NAME, or is no keys command`);
}

export async function cmdDashboard(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { hub: { type: 'string' }, link: { type: 'boolean' }, 'read-only': { type: 'boolean' } } });
  const base = hubUrl(values.hub);
  if (!values.link) {
    console.log(`${base}/`);
    return 0;
  }
  const res = await api(base, '/api/dashboard/links', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ read_only: values['read-only'] === true }) });
  const j = (await res.json()) as { urls: string[]; path: string; expires_at: string; error?: { code?: string; message?: string } };
  if (!res.ok) return apiFailure(j);
  console.error(`A one-time ${values['read-only'] ? 'read-only ' : ''}dashboard login, valid until ${j.expires_at}; open it on the other machine (the address its network reaches this hub at):`);
  for (const u of j.urls) console.log(u);
  return 0;
}
