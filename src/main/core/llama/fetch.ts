import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readdirSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { processEnv } from '../config.js';

/**
 * The only downloads relay makes: pinned npm packages through the registry (`npm pack`, nothing installed),
 * each checked against its recorded sha512 integrity before a byte of it is used.
 */

export type Progress = (line: string) => void;

export function cacheRoot(env: NodeJS.ProcessEnv = processEnv()): string {
  return env.RELAY_CACHE_DIR ?? join(homedir(), '.cache', 'relay');
}

export function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; progress: Progress; filter?: (l: string) => boolean }): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? processEnv(), stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true });
    const tail: string[] = [];
    const onLine = (l: string): void => {
      tail.push(l);
      if (tail.length > 40) tail.shift();
      if (!opts.filter || opts.filter(l)) opts.progress(l);
    };
    createInterface({ input: child.stdout }).on('line', onLine);
    createInterface({ input: child.stderr }).on('line', onLine);
    child.on('error', (err) => reject(new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `${cmd}: ${err.message}`, { cmd })));
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `${cmd} ${args.join(' ')} exited with ${code}\n${tail.join('\n')}`, { cmd, code }));
    });
  });
}

export async function sha512Base64(path: string): Promise<string> {
  const h = createHash('sha512');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('base64');
}

/** `npm pack name@version` into `dir`, verified; returns the tarball's path. A mismatch deletes it and throws `code`. */
export async function packFromRegistry(name: string, version: string, integrity: string, dir: string, progress: Progress, code: ErrorCode): Promise<string> {
  const spec = `${name}@${version}`;
  const tarball = (): string | undefined => readdirSync(dir).find((f) => f.endsWith(`-${version}.tgz`));
  if (!tarball()) {
    progress(`fetching ${spec} from the npm registry (nothing is installed)`);
    await run('npm', ['pack', spec, '--pack-destination', dir, '--silent'], { cwd: dir, progress, filter: () => false });
  }
  const file = tarball();
  if (!file || !existsSync(join(dir, file))) throw new RelayError(code, `npm pack ${spec} left no tarball in ${dir}`);
  const tgz = join(dir, file);
  const got = `sha512-${await sha512Base64(tgz)}`;
  if (got !== integrity) {
    rmSync(tgz, { force: true });
    throw new RelayError(code, `${spec} has integrity ${got}, expected ${integrity}`, { got, expected: integrity });
  }
  progress(`verified ${spec} (${integrity.slice(0, 20)}…)`);
  return tgz;
}
