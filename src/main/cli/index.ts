import { isRelayError } from '../../shared/errors.js';
import { packageVersion } from '../core/hub/index.js';
import { cmdDashboard } from './access.js';
import { cmdKeys } from './keys.js';
import { cmdCache } from './cache.js';
import { cmdHub } from './hub.js';
import { cmdDoctor, cmdLlamaBuild } from './llama.js';
import { cmdModels } from './models.js';
import { cmdNodes } from './nodes.js';
import { cmdPause, cmdUp, nodeHome } from './node.js';
import { cmdStatus } from './status.js';
import { USAGE, usageAnswer } from './usage.js';

/** The `relay` command's entry (bin/relay.js): the command table; each command group is its own file. */

/** Each command: the rest of the line after its name goes to it (commands with subcommands get `sub` apart). */
const COMMANDS: Readonly<Record<string, (sub: string | undefined, rest: string[]) => Promise<number>>> = {
  hub: (sub, rest) => cmdHub(whole(sub, rest)),
  models: cmdModels,
  nodes: cmdNodes,
  keys: cmdKeys,
  dashboard: (sub, rest) => cmdDashboard(whole(sub, rest)),
  up: (sub, rest) => cmdUp(whole(sub, rest)),
  pause: (sub, rest) => cmdPause(true, whole(sub, rest)),
  resume: (sub, rest) => cmdPause(false, whole(sub, rest)),
  llama: async (sub, rest) => (sub === 'build' ? cmdLlamaBuild(rest) : unknown(['llama', ...whole(sub, rest)])),
  cache: (sub, rest) => cmdCache(sub, rest, nodeHome),
  status: (sub, rest) => cmdStatus(whole(sub, rest)),
  doctor: (sub, rest) => cmdDoctor(whole(sub, rest)),
};

const whole = (sub: string | undefined, rest: string[]): string[] => (sub === undefined ? rest : [sub, ...rest]);

function unknown(argv: string[]): number {
  console.error(`relay: unknown command "${argv.join(' ')}"\n`);
  process.stderr.write(USAGE);
  return 2;
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (cmd === undefined || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(USAGE);
    return cmd === undefined ? 1 : 0;
  }
  if (cmd === '--version' || cmd === '-v') {
    console.log(packageVersion());
    return 0;
  }
  const run = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!run) return unknown(argv);
  try {
    return await run(sub, rest);
  } catch (err) {
    // A bad option or argument: one line, the command's usage, exit 2 (never a stack trace).
    const answer = usageAnswer(cmd, err);
    if (answer === null) throw err;
    process.stderr.write(answer);
    return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (isRelayError(err)) console.error(`relay: ${err.code}: ${err.message}`);
    else if (err instanceof Error && (err as NodeJS.ErrnoException).code === undefined) console.error(`relay: ${err.message}`);
    else console.error(`relay: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 1;
  },
);
