import { UsageError } from './usage.js';
import { cliConfigFromEnv } from '../core/config.js';
import { parseSchedule } from '../core/availability.js';

/** What the CLI's commands share: flags and the hub's admin API. */

/** A --schedule flag checked as the hub and node will read it (a bad one is a usage error). */
export function scheduleFlag(v: string | undefined): void {
  if (v === undefined) return;
  try {
    parseSchedule(v);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function intFlag(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new UsageError(`${name} must be an integer, got "${v}"`);
  return n;
}

export function hubUrl(v: string | undefined): string {
  return (v ?? cliConfigFromEnv().hubUrl).replace(/\/+$/, '');
}

export async function api(base: string, path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = cliConfigFromEnv().adminToken;
  if (token) headers.set('authorization', `Bearer ${token}`);
  try {
    return await fetch(`${base}${path}`, { ...init, headers });
  } catch (err) {
    throw new Error(`cannot reach the hub at ${base} (${(err as Error).cause ? String((err as { cause: Error }).cause.message) : (err as Error).message}); is \`relay hub\` running? (--hub URL)`, {
      cause: err,
    });
  }
}

export function apiFailure(j: { error?: { code?: string; message?: string } }): number {
  console.error(`relay: ${j.error?.code ?? 'error'}: ${j.error?.message ?? JSON.stringify(j)}`);
  return 1;
}
