import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import { PRIORITIES, type Priority } from '../../scheduler/decide/turns.js';

/**
 * API keys for /v1, with names so a household can tell them apart and revoke one. Only a key's SHA-256 is
 * stored (relay.json); the key itself is shown once, when it is made. A hub that listens beyond loopback
 * requires a key on /v1, so a guest on the Wi-Fi cannot use the GPUs. Each key has its rules (issue #54): its class
 * — `interactive` (the default: a person, a voice assistant) or `background` (an agent, a batch job: it waits behind
 * people and gives its slot up to them) — and optional quotas: tokens per day, requests at once.
 */
export interface ApiKeyView extends KeyRules {
  readonly name: string;
  /** The key's first characters, to recognise it in a client's settings. */
  readonly prefix: string;
  readonly created_at: string;
  readonly last_used_at: string | null;
}

/** A key's rules as the API and the CLI show them (null: no limit). */
export interface KeyRules {
  readonly priority: Priority;
  readonly max_tokens_per_day: number | null;
  readonly max_concurrent: number | null;
}

/** The rules a request may change, as read from a body (a field absent: unchanged; null: no limit). */
export type KeyRulesChange = Partial<KeyRules>;

/** Pure: a body's rules checked; an unknown class or a quota that is not a positive whole number is refused (nothing changes). */
export function keyRulesChange(body: Record<string, unknown>): KeyRulesChange {
  const out: { -readonly [K in keyof KeyRules]?: KeyRules[K] } = {};
  if (body.priority !== undefined) {
    if (!PRIORITIES.includes(body.priority as Priority)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `"priority" is one of ${PRIORITIES.join(', ')}, got ${JSON.stringify(body.priority)}`);
    out.priority = body.priority as Priority;
  }
  for (const k of ['max_tokens_per_day', 'max_concurrent'] as const) {
    const v = body[k];
    if (v === undefined) continue;
    if (v !== null && !(Number.isSafeInteger(v) && (v as number) > 0))
      throw new RelayError(ErrorCode.INVALID_ARGUMENT, `"${k}" is a whole number above 0, or null for no limit; got ${JSON.stringify(v)}`);
    out[k] = v as number | null;
  }
  return out;
}

const rulesOf = (k: ApiKeyRecord): KeyRules => ({ priority: k.priority ?? 'interactive', max_tokens_per_day: k.max_tokens_per_day ?? null, max_concurrent: k.max_concurrent ?? null });

function applyRules(k: ApiKeyRecord, change: KeyRulesChange): void {
  if (change.priority !== undefined) k.priority = change.priority;
  for (const f of ['max_tokens_per_day', 'max_concurrent'] as const) {
    if (change[f] === undefined) continue;
    if (change[f] === null) delete k[f];
    else k[f] = change[f];
  }
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._ -]{0,63}$/;

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

export class ApiKeys {
  /** last_used_at is kept in memory and written at most once a minute per key. */
  private readonly lastUsed = new Map<string, number>();

  constructor(private readonly store: Store) {}

  list(): ApiKeyView[] {
    return (this.store.data.api_keys ?? []).map((k) => ({
      name: k.name,
      prefix: k.prefix,
      created_at: k.created_at,
      last_used_at: this.lastUsed.has(k.name) ? new Date(this.lastUsed.get(k.name)!).toISOString() : k.last_used_at,
      ...rulesOf(k),
    }));
  }

  /** A key's rules (a name no key has: the defaults, interactive and unlimited — requests without a key). */
  rules(name: string | null): KeyRules {
    const k = name === null ? undefined : this.store.data.api_keys?.find((x) => x.name === name);
    return k ? rulesOf(k) : { priority: 'interactive', max_tokens_per_day: null, max_concurrent: null };
  }

  get any(): boolean {
    return (this.store.data.api_keys ?? []).length > 0;
  }

  /** A new key under a new name, with its rules; the only time the key itself is seen. */
  async create(name: string, rules: KeyRulesChange = {}): Promise<{ name: string; key: string } & KeyRules> {
    if (!NAME.test(name)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `a key name is 1-64 letters, digits, ".", "_", "-" or spaces, got "${name.slice(0, 80)}"`);
    const key = `relay-${randomBytes(24).toString('base64url')}`;
    const record = await this.store.update((d) => {
      const keys = (d.api_keys ??= []);
      if (keys.some((k) => k.name === name)) throw new RelayError(ErrorCode.KEY_EXISTS, `a key named "${name}" exists (revoke it first)`);
      const k: ApiKeyRecord = { name, sha256: digest(key).toString('hex'), prefix: key.slice(0, 10), created_at: new Date().toISOString(), last_used_at: null };
      applyRules(k, rules);
      keys.push(k);
      return k;
    });
    return { name, key, ...rulesOf(record) };
  }

  /** Change a key's rules (a field left out stays as it is); its rules after. */
  async update(name: string, change: KeyRulesChange): Promise<KeyRules> {
    return this.store.update((d) => {
      const k = d.api_keys?.find((x) => x.name === name);
      if (!k) throw new RelayError(ErrorCode.KEY_NOT_FOUND, `no key named "${name}"`);
      applyRules(k, change);
      return rulesOf(k);
    });
  }

  async revoke(name: string): Promise<void> {
    await this.store.update((d) => {
      const keys = d.api_keys ?? [];
      const i = keys.findIndex((k) => k.name === name);
      if (i < 0) throw new RelayError(ErrorCode.KEY_NOT_FOUND, `no key named "${name}"`);
      keys.splice(i, 1);
    });
    this.lastUsed.delete(name);
  }

  /** The name of the key `token` is, or null. Compares digests in constant time. */
  verify(token: string): string | null {
    const d = digest(token);
    for (const k of this.store.data.api_keys ?? []) {
      if (timingSafeEqual(d, Buffer.from(k.sha256, 'hex'))) {
        this.touch(k.name);
        return k.name;
      }
    }
    return null;
  }

  private touch(name: string): void {
    const now = Date.now();
    const prev = this.lastUsed.get(name) ?? 0;
    this.lastUsed.set(name, now);
    if (now - prev < 60_000) return;
    void this.store
      .update((d) => {
        const k = d.api_keys?.find((x) => x.name === name);
        if (k) k.last_used_at = new Date(now).toISOString();
      })
      .catch(() => undefined);
  }
}
