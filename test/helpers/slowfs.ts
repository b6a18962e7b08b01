import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cacheRoot } from '../../src/main/core/llama/fetch.js';
import { until } from './proc.js';

/**
 * A slow disk for tests: a FUSE mount (test/helpers/slowfs.c, libfuse3) showing one folder read-only, every
 * read paced to `bytesPerSecond`. llama-server reads a model through it as it would from a USB disk, so a load
 * lasts as long as its size says — honestly, with no sleep inside relay. Built once per source into the cache.
 */
const source = new URL('../../../test/helpers/slowfs.c', import.meta.url).pathname;

function binary(): string {
  const c = readFileSync(source);
  const dir = join(cacheRoot(), 'slowfs', createHash('sha256').update(c).digest('hex').slice(0, 16));
  const bin = join(dir, 'slowfs');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const flags = execFileSync('pkg-config', ['--cflags', '--libs', 'fuse3'], { encoding: 'utf8' }).trim().split(/\s+/);
  execFileSync('gcc', ['-O2', '-Wall', '-o', `${bin}.tmp`, source, ...flags]);
  renameSync(`${bin}.tmp`, bin);
  return bin;
}

export interface SlowDisk {
  /** Where the folder's files are seen, slowly. */
  readonly dir: string;
  close(): Promise<void>;
}

export async function slowDisk(folder: string, bytesPerSecond: number): Promise<SlowDisk> {
  const mount = mkdtempSync(join(tmpdir(), 'relay-slowfs-'));
  const proc: ChildProcess = spawn(binary(), [folder, String(Math.round(bytesPerSecond)), mount], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const mounted = await until(
    () => readFileSync('/proc/self/mounts', 'utf8').includes(`slowfs ${mount} fuse `) || proc.exitCode !== null,
    (x) => x,
    10_000,
  );
  if (!mounted || proc.exitCode !== null) {
    proc.kill('SIGKILL');
    throw new Error(`slowfs did not mount ${mount}: ${err}`);
  }
  return {
    dir: mount,
    async close() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}
