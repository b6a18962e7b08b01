import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

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

/** Sends `signal` unless the process has already exited. */
export function signalIfRunning(proc: ChildProcess, signal: NodeJS.Signals): void {
  if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
}

/**
 * A Node script that reports as JSON lines on stdout (the tray-app host, the Electron shell on its
 * stand-in): the lines so far, `wait` for one, `send` a JSON line to its stdin. Every one started is
 * SIGKILLed by `killAllJsonLineProcesses` (call it from an `after`).
 */
export interface JsonLineProcess {
  readonly proc: ChildProcess;
  readonly lines: Record<string, unknown>[];
  readonly exited: Promise<number | null>;
  send(cmd: Record<string, unknown>): void;
  wait<T = Record<string, unknown>>(pick: (l: Record<string, unknown>) => boolean, limitMs?: number): Promise<T>;
}
const started: ChildProcess[] = [];

export function startJsonLineProcess(args: string[], env: NodeJS.ProcessEnv): JsonLineProcess {
  const proc = spawn(process.execPath, args, { env, stdio: ['pipe', 'pipe', 'inherit'] });
  started.push(proc);
  const lines: Record<string, unknown>[] = [];
  createInterface({ input: proc.stdout }).on('line', (l) => {
    try {
      lines.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      /* not a report line */
    }
  });
  return {
    proc,
    lines,
    exited: new Promise((r) => proc.once('exit', (c) => r(c))),
    send: (cmd) => void proc.stdin.write(`${JSON.stringify(cmd)}\n`),
    async wait<T>(pick: (l: Record<string, unknown>) => boolean, limitMs = 30_000) {
      const found = await until(
        () => lines.find(pick),
        (x) => x !== undefined,
        limitMs,
      );
      if (!found) throw new Error(`no such line; got:\n${lines.map((l) => JSON.stringify(l)).join('\n')}`);
      return found as T;
    },
  };
}

export function killAllJsonLineProcesses(): void {
  for (const p of started) signalIfRunning(p, 'SIGKILL');
}

/** A running process's command line, as the kernel holds it (what relay actually launched). */
export function argvOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}
