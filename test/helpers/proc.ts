import { existsSync, readFileSync } from 'node:fs';

/** True while `pid` exists and is not a zombie. */
export function alive(pid: number): boolean {
  if (!existsSync(`/proc/${pid}`)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Polls until `pid` is gone; false if it is still there after `limitMs` (a deadline, not a measurement). */
export async function waitGone(pid: number, limitMs: number): Promise<boolean> {
  const until = Date.now() + limitMs;
  while (Date.now() < until) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

/** Polls `f` until `ok` holds or `limitMs` passes (a deadline, not a measurement); returns the last value. */
export async function until<T>(f: () => Promise<T> | T, ok: (v: T) => boolean, limitMs = 20_000, everyMs = 50): Promise<T> {
  const end = Date.now() + limitMs;
  let v = await f();
  while (!ok(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, everyMs));
    v = await f();
  }
  return v;
}
