import { parseArgs } from 'node:util';
import { api, apiFailure, hubUrl } from './api.js';

/** `relay dashboard [--link]` (the page, or a login link for another machine). */
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
