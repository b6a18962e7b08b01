import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signalIfRunning, until } from './proc.js';

/**
 * Windows programs under Debian's Wine, as the closest real thing to a Windows PC on these Linux machines
 * (LLAMA-NOTES: a prefix of its own, WINEDEBUG=-all, stdin from /dev/null, output to files — a pipe can give a
 * Windows program EBADF). Each WinePrefix has its own wineserver, shut down by close().
 */
export interface WinePrefix {
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  /** Start `exe` with `args`; its stdout and stderr go to a file read by output(). */
  start(exe: string, args: readonly string[], name: string): WineProcess;
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
  const started: WineProcess[] = [];
  return {
    dir,
    env,
    start(exe, args, name) {
      const log = join(dir, `${name}.log`);
      const fd = openSync(log, 'w');
      const child = spawn('wine', [exe, ...args], { env, stdio: ['ignore', fd, fd] });
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
