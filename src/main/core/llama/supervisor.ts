import { healthStatus } from './health.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { processEnv } from '../config.js';

/**
 * The one place relay starts child processes (llama-server, ggml-rpc-server). Readiness is a promise that
 * settles on a health answer or a listening line, never on a sleep; an early exit or a timeout rejects with
 * the stderr tail. No child outlives relay: Linux children get PDEATHSIG (they die even if relay is
 * SIGKILLed), and every live child is killed when the process exits.
 */

export type Readiness =
  | { readonly kind: 'http'; readonly url: string; readonly intervalMs?: number }
  | { readonly kind: 'line'; readonly pattern: RegExp }
  /** A TCP connect succeeds (ggml-rpc-server block-buffers its stdout when piped, so its banner can lag). */
  | { readonly kind: 'tcp'; readonly host: string; readonly port: number; readonly intervalMs?: number }
  | { readonly kind: 'none' };

export interface SpawnSpec {
  /** Short label for logs and errors, e.g. `llama-server[dense]`. */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  readonly readiness: Readiness;
  readonly readyTimeoutMs?: number;
  /** Lines of output kept for errors and inspection. */
  readonly keepLines?: number;
  readonly onLine?: (line: string, stream: 'stdout' | 'stderr') => void;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

const live = new Set<ChildProcess>();
/** Other children relay starts and waits for (`--list-devices`): not "another program" for auto-pause either. */
const tracked = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Count a child started elsewhere (a short-lived helper) as relay's own while it runs. */
export function trackChild(c: ChildProcess): void {
  tracked.add(c);
  c.once('exit', () => tracked.delete(c));
  c.once('error', () => tracked.delete(c));
}

/**
 * The pids of every child relay runs now, from the moment it was spawned (a llama-server still loading
 * included): auto-pause never counts relay's own processes as another program using the GPU.
 */
export function ownChildPids(): Set<number> {
  const out = new Set<number>();
  for (const c of [...live, ...tracked]) if (c.pid !== undefined && c.exitCode === null && c.signalCode === null) out.add(c.pid);
  return out;
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' handlers must be synchronous: SIGKILL is the only thing that certainly lands in time.
  process.on('exit', () => {
    for (const c of live) {
      try {
        c.kill('SIGKILL');
      } catch {
        /* already gone */
      }
    }
  });
}

// Windows needs nothing of relay's own: libuv puts every child that is not spawned `detached` in one Job Object
// with KILL_ON_JOB_CLOSE, so Windows ends them when relay ends, however it ends (tested under Wine by
// test/windows/wine-node.test.ts). relay never spawns a child detached (test/arch checks it).
const SETPRIV = '/usr/bin/setpriv';
/** `setpriv --pdeathsig KILL` execs the target in place: same pid, and the kernel kills it if relay dies. */
function withDeathSignal(command: string, args: readonly string[]): [string, string[]] {
  if (process.platform === 'linux' && existsSync(SETPRIV)) return [SETPRIV, ['--pdeathsig', 'KILL', '--', command, ...args]];
  return [command, [...args]];
}

/** Whether a process with this pid exists (any platform; one of another user's counts: EPERM). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** The process's state letter from /proc (Linux; `T` stopped, `Z` a zombie, `X` gone), or null where it cannot be read. */
export function processState(pid: number): string | null {
  if (process.platform !== 'linux') return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] ?? null;
  } catch {
    return 'X'; // no such process
  }
}

/** A child stopped (SIGSTOP, a debugger) for this long while it loads will not become ready: its start fails. */
const STOPPED_WHILE_LOADING_MS = 2000;

export class ManagedChild {
  readonly name: string;
  readonly ready: Promise<void>;
  readonly exited: Promise<ExitInfo>;
  private readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private readonly keep: number;
  private exitInfo: ExitInfo | null = null;
  private terminating: Promise<ExitInfo> | null = null;

  constructor(spec: SpawnSpec) {
    installExitHook();
    this.name = spec.name;
    this.keep = spec.keepLines ?? 400;
    if (spec.command.includes('/') && !existsSync(spec.command)) {
      throw new RelayError(ErrorCode.CHILD_SPAWN_FAILED, `${spec.name}: ${spec.command} does not exist`, { command: spec.command });
    }
    const [cmd, args] = withDeathSignal(spec.command, spec.args);
    this.child = spawn(cmd, args, {
      env: spec.env ?? processEnv(),
      cwd: spec.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      windowsHide: true, // no console window per child when the tray app (a GUI program) runs on Windows
    });
    live.add(this.child);

    const lineWaiters: ((l: string) => void)[] = [];
    for (const stream of ['stdout', 'stderr'] as const) {
      const s = this.child[stream];
      if (!s) continue;
      createInterface({ input: s, crlfDelay: Infinity }).on('line', (l) => {
        this.lines.push(l);
        if (this.lines.length > this.keep) this.lines.shift();
        spec.onLine?.(l, stream);
        for (const w of lineWaiters) w(l);
      });
    }

    this.exited = new Promise<ExitInfo>((resolve) => {
      const done = (info: ExitInfo): void => {
        if (this.exitInfo) return;
        this.exitInfo = info;
        live.delete(this.child);
        resolve(info);
      };
      this.child.on('error', () => done({ code: -1, signal: null }));
      // 'close' fires after the output streams are drained, so the tail includes the last lines.
      this.child.on('close', (code, signal) => done({ code, signal }));
    });

    let spawnError: Error | null = null;
    this.child.on('error', (err) => {
      spawnError = err;
    });

    const timeoutMs = spec.readyTimeoutMs ?? 120_000;
    this.ready = new Promise<void>((resolve, reject) => {
      let settled = false;
      const settle = (err?: RelayError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearInterval(watchStop);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => {
        settle(this.error(ErrorCode.CHILD_READY_TIMEOUT, `${this.name} was not ready after ${timeoutMs} ms`));
        void this.terminate(2000);
      }, timeoutMs);
      // A load can take half an hour; a stopped process never finishes one. Looked at twice a second (Linux).
      let stoppedSince: number | null = null;
      const watchStop = setInterval(() => {
        if (settled) return clearInterval(watchStop);
        const st = this.child.pid === undefined ? null : processState(this.child.pid);
        if (st !== 'T' && st !== 't') return void (stoppedSince = null);
        stoppedSince ??= Date.now();
        if (Date.now() - stoppedSince >= STOPPED_WHILE_LOADING_MS) {
          clearInterval(watchStop);
          settle(this.error(ErrorCode.CHILD_STOPPED, `${this.name} was stopped (SIGSTOP?) while it loaded`));
        }
      }, 500);
      watchStop.unref();
      void this.exited.then((info) => {
        if (spawnError) {
          settle(new RelayError(ErrorCode.CHILD_SPAWN_FAILED, `${this.name}: cannot start ${spec.command}: ${spawnError.message}`, { command: spec.command }));
        } else {
          settle(this.error(ErrorCode.CHILD_EXITED_EARLY, `${this.name} exited before it was ready (${describeExit(info)})`));
        }
      });
      const r = spec.readiness;
      if (r.kind === 'none') settle();
      else if (r.kind === 'line')
        lineWaiters.push((l) => {
          if (r.pattern.test(l)) settle();
        });
      else if (r.kind === 'tcp')
        void pollTcp(r.host, r.port, r.intervalMs ?? 100, () => settled).then((ok) => {
          if (ok) settle();
        });
      else
        void pollHealth(r.url, r.intervalMs ?? 100, () => settled).then((ok) => {
          if (ok) settle();
        });
    });
    // A caller that only awaits `exited` must not see an unhandled rejection from `ready`.
    this.ready.catch(() => undefined);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.exitInfo === null;
  }

  /** The last lines the child printed (stdout and stderr interleaved as they arrived). */
  output(): readonly string[] {
    return this.lines;
  }

  tail(n = 30): string {
    return this.lines.slice(-n).join('\n');
  }

  private error(code: ErrorCode, message: string): RelayError {
    return new RelayError(code, `${message}\n--- last output ---\n${this.tail()}`, { name: this.name, tail: this.tail() });
  }

  /**
   * SIGTERM, then SIGKILL after graceMs. A stopped child (SIGSTOP, a debugger) is continued after the SIGTERM, as
   * a shell does for a stopped job, so it can handle it. Idempotent; resolves when the process is gone. On
   * Windows Node's SIGTERM is TerminateProcess: the stop is immediate there. That is the rule, not a gap: a
   * console Ctrl+Break reaches only a child in its own process group, which Node makes only for `detached`
   * children, and those leave the job that ends them with relay; llama-server and ggml-rpc-server write
   * nothing at exit, and relay's own graceful part (no request routed to it any more, kept slots saved over HTTP) runs first.
   */
  terminate(graceMs = 5000): Promise<ExitInfo> {
    if (this.exitInfo) return Promise.resolve(this.exitInfo);
    if (this.terminating) return this.terminating;
    this.terminating = (async () => {
      this.child.kill('SIGTERM');
      // Windows has no stopped processes (and Node there knows no SIGCONT); its SIGTERM already ends the process.
      if (process.platform !== 'win32') this.child.kill('SIGCONT');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
      try {
        return await this.exited;
      } finally {
        clearTimeout(timer);
      }
    })();
    return this.terminating;
  }

  /** Force: SIGKILL now. */
  destroy(): Promise<ExitInfo> {
    if (!this.exitInfo) this.child.kill('SIGKILL');
    return this.exited;
  }
}

export function describeExit(info: ExitInfo): string {
  return info.signal ? `signal ${info.signal}` : `exit code ${info.code}`;
}

async function pollHealth(url: string, intervalMs: number, stop: () => boolean): Promise<boolean> {
  while (!stop()) {
    if ((await healthStatus(url, 2000)) === 200) return true; // else not listening yet, or loading
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  return false;
}

async function pollTcp(host: string, port: number, intervalMs: number, stop: () => boolean): Promise<boolean> {
  while (!stop()) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect({ host, port });
      sock.once('connect', () => {
        sock.destroy();
        resolve(true);
      });
      sock.once('error', () => resolve(false));
    });
    if (ok) return true;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  return false;
}

export function spawnChild(spec: SpawnSpec): ManagedChild {
  return new ManagedChild(spec);
}

/** Every child still running (for shutdown paths and tests). */
export function liveChildCount(): number {
  return live.size;
}

/** Graceful shutdown of every live child. */
export async function terminateAll(graceMs = 5000): Promise<void> {
  await Promise.all(
    [...live].map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once('close', () => resolve());
          c.kill('SIGTERM');
          c.kill('SIGCONT');
          setTimeout(() => c.kill('SIGKILL'), graceMs).unref();
        }),
    ),
  );
}
