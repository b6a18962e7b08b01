import type { KeyDto, NoKeyUsageDto } from '../../../../shared/keys.js';
import type { AppDeps } from '../http/context.js';

/** Each key with its rules and what it used today and this month, and requests without a key (/status, GET /api/keys). */
export function keyViews(d: Pick<AppDeps, 'keys' | 'usage' | 'admission'>): { keys: KeyDto[]; noKey: NoKeyUsageDto } {
  return {
    keys: d.keys.list().map((k) => ({ ...k, in_flight: d.admission.inFlightOf(k.name), today: d.usage.today(k.name), month: d.usage.month(k.name) })),
    noKey: { in_flight: d.admission.inFlightOf(null), today: d.usage.today(null), month: d.usage.month(null) },
  };
}
