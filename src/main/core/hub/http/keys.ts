import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { Store } from '../../store/store.js';

/**
 * API keys for /v1, with names so a household can tell them apart and revoke one. Only a key's SHA-256 is
 * stored (relay.json); the key itself is shown once, when it is made. A hub that listens beyond loopback
 * requires a key on /v1, so a guest on the Wi-Fi cannot use the GPUs.
 */
export interface ApiKeyView {
  readonly name: string;
  /** The key's first characters, to recognise it in a client's settings. */
  readonly prefix: string;
  readonly created_at: string;
  readonly last_used_at: string | null;
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
    }));
  }

  get any(): boolean {
    return (this.store.data.api_keys ?? []).length > 0;
  }

  /** A new key under a new name; the only time the key itself is seen. */
  async create(name: string): Promise<{ name: string; key: string }> {
    if (!NAME.test(name)) throw new RelayError(ErrorCode.INVALID_ARGUMENT, `a key name is 1-64 letters, digits, ".", "_", "-" or spaces, got "${name.slice(0, 80)}"`);
    const key = `relay-${randomBytes(24).toString('base64url')}`;
    await this.store.update((d) => {
      const keys = (d.api_keys ??= []);
      if (keys.some((k) => k.name === name)) throw new RelayError(ErrorCode.KEY_EXISTS, `a key named "${name}" exists (revoke it first)`);
      keys.push({ name, sha256: digest(key).toString('hex'), prefix: key.slice(0, 10), created_at: new Date().toISOString(), last_used_at: null });
    });
    return { name, key };
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
