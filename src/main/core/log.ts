import { existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';
import { logLevelFromEnv } from './config.js';

/**
 * pino, pretty on a TTY and JSON lines otherwise. RELAY_LOG_LEVEL sets the level (default info).
 * With `file` (the tray app: it has no terminal), JSON lines go to that file instead; a file over
 * `maxFileBytes` (10 MiB) at start is kept as `<file>.1` and a new one begun.
 */
export function createLogger(opts: { level?: string; pretty?: boolean; name?: string; file?: string; maxFileBytes?: number } = {}): Logger {
  const level = opts.level ?? logLevelFromEnv();
  const usePretty = opts.pretty ?? Boolean(process.stderr.isTTY);
  const base = { level, name: opts.name ?? 'relay' };
  if (opts.file) {
    mkdirSync(dirname(opts.file), { recursive: true });
    if (existsSync(opts.file) && statSync(opts.file).size > (opts.maxFileBytes ?? 10 * 1024 * 1024)) renameSync(opts.file, `${opts.file}.1`);
    return pino(base, pino.destination({ dest: opts.file, sync: true, append: true }));
  }
  if (usePretty) return pino(base, pretty({ colorize: true, destination: 2, ignore: 'pid,hostname', sync: true }));
  return pino(base, pino.destination({ dest: 2, sync: true }));
}

export type { Logger };

/**
 * A promise that failed with nobody to handle it is a bug, but not a reason to stop serving a household's requests
 * (Node would exit): it is logged with its stack and the process goes on. `relay hub`, `relay up` and the tray app.
 */
export function logStrayRejections(log: Logger): void {
  process.on('unhandledRejection', (reason) => {
    const err = reason instanceof Error ? { message: reason.message, stack: reason.stack } : { message: String(reason) };
    log.error({ err }, 'a failure nobody handled: logged, serving on');
  });
}
