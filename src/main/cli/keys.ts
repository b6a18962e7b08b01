import { parseArgs } from 'node:util';
import type { KeyDto, NoKeyUsageDto, UsageDto } from '../../shared/keys.js';
import { api, apiFailure, hubUrl } from './api.js';
import { UsageError } from './usage.js';

/**
 * `relay keys …`: API keys for /v1 and their rules (issue #54) — `create NAME`, `set NAME`, `ls`, `revoke NAME`.
 * A key's class (`--priority interactive|background`) and quotas (`--max-tokens-per-day N`, `--max-concurrent N`;
 * `none`: no limit) are checked here before the hub is asked, and again by the hub.
 */
const OPTIONS = {
  hub: { type: 'string' },
  json: { type: 'boolean' },
  priority: { type: 'string' },
  'max-tokens-per-day': { type: 'string' },
  'max-concurrent': { type: 'string' },
} as const;

/** A quota flag: a whole number above 0, or `none` (no limit); absent: unchanged. */
function quotaFlag(v: string | undefined, name: string): number | null | undefined {
  if (v === undefined) return undefined;
  if (v === 'none') return null;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`${name} is a whole number above 0 or "none", got "${v}"`);
  return n;
}

function rulesOf(values: { priority?: string; 'max-tokens-per-day'?: string; 'max-concurrent'?: string }): Record<string, unknown> {
  if (values.priority !== undefined && values.priority !== 'interactive' && values.priority !== 'background') throw new UsageError(`--priority is interactive or background, got "${values.priority}"`);
  const rules: Record<string, unknown> = {};
  if (values.priority !== undefined) rules.priority = values.priority;
  const tokens = quotaFlag(values['max-tokens-per-day'], '--max-tokens-per-day');
  const concurrent = quotaFlag(values['max-concurrent'], '--max-concurrent');
  if (tokens !== undefined) rules.max_tokens_per_day = tokens;
  if (concurrent !== undefined) rules.max_concurrent = concurrent;
  return rules;
}

const used = (u: UsageDto): string => `${u.prompt_tokens} in / ${u.completion_tokens} out, ${u.requests} req${u.yields > 0 ? `, ${u.yields} yielded` : ''}`;
const limits = (k: KeyDto): string =>
  `${k.max_tokens_per_day === null ? 'no daily limit' : `${k.max_tokens_per_day} tokens/day`}, ${k.max_concurrent === null ? 'any at once' : `${k.max_concurrent} at once`}`;

export async function cmdKeys(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: OPTIONS });
  const base = hubUrl(values.hub);
  const name = positionals[0];
  if (sub === 'create' && name) {
    const res = await api(base, '/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, ...rulesOf(values) }) });
    const j = (await res.json()) as { name: string; key: string; priority: string; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.error(`API key "${j.name}" (${j.priority}; shown once: the hub keeps only its SHA-256). Use it as the bearer key for ${base}/v1:`);
    console.log(j.key);
    return 0;
  }
  if (sub === 'set' && name) {
    const rules = rulesOf(values);
    if (Object.keys(rules).length === 0) throw new UsageError(`set ${name} needs --priority, --max-tokens-per-day or --max-concurrent`);
    const res = await api(base, `/api/keys/${encodeURIComponent(name)}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify(rules) });
    const j = (await res.json()) as KeyDto & { error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`${name}: ${j.priority}, ${limits({ ...j, in_flight: 0, today: ZERO, month: ZERO })}`);
    return 0;
  }
  if (sub === 'ls') {
    const res = await api(base, '/api/keys');
    const j = (await res.json()) as { keys: KeyDto[]; no_key: NoKeyUsageDto; required: boolean; error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    if (values.json) console.log(JSON.stringify(j, null, 2));
    else {
      console.log(`/v1 ${j.required ? 'requires' : 'does not require'} a key`);
      for (const k of j.keys) {
        console.log(`${k.name.padEnd(24)} ${k.prefix}…  ${k.priority.padEnd(11)} ${limits(k)}  last used ${k.last_used_at ?? 'never'}`);
        console.log(`${''.padEnd(24)} today ${used(k.today)}; this month ${used(k.month)}`);
      }
      if (j.no_key.month.requests > 0) console.log(`${'(no key)'.padEnd(24)} today ${used(j.no_key.today)}; this month ${used(j.no_key.month)}`);
    }
    return 0;
  }
  if ((sub === 'revoke' || sub === 'rm') && name) {
    const res = await api(base, `/api/keys/${encodeURIComponent(name)}`, { method: 'DELETE' });
    const j = (await res.json()) as { error?: { code?: string; message?: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`revoked: ${name}`);
    return 0;
  }
  throw new UsageError(sub === undefined ? 'say what to do with keys' : `"${sub}" needs a NAME, or is no keys command`);
}

const ZERO: UsageDto = { prompt_tokens: 0, completion_tokens: 0, requests: 0, yields: 0 };
