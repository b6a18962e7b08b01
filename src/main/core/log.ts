import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

/** pino, pretty on a TTY and JSON lines otherwise. RELAY_LOG_LEVEL sets the level (default info). */
export function createLogger(opts: { level?: string; pretty?: boolean; name?: string } = {}): Logger {
  const level = opts.level ?? process.env.RELAY_LOG_LEVEL ?? 'info';
  const usePretty = opts.pretty ?? Boolean(process.stderr.isTTY);
  const base = { level, name: opts.name ?? 'relay' };
  if (usePretty) return pino(base, pretty({ colorize: true, destination: 2, ignore: 'pid,hostname', sync: true }));
  return pino(base, pino.destination({ dest: 2, sync: true }));
}

export type { Logger };
