import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { withLock } from '../../src/main/core/llama/build.js';
import { cacheRoot } from '../../src/main/core/llama/fetch.js';
import { installDir } from '../../src/main/core/llama/install.js';
import { buildWindows, windowsInstallDir } from '../../src/main/core/llama/build-windows.js';

/**
 * The release as `npm run release` builds it (scripts/release.mjs), once per content: a build is kept under
 * ~/.cache/relay/release-builds/<key>/ where the key hashes everything that goes into it (the compiled code, the
 * dashboard, the scripts, package.json and its lock, both llama.cpp builds). Test files share it.
 */
/** A log line of relay building llama.cpp or fetching anything (build.ts, fetch.ts): none may appear from a release. */
export const BUILD_OR_FETCH = /no llama\.cpp shipped|configuring llama\.cpp|building llama-server|from the npm registry|npm pack/;

export interface ReleaseBuild {
  readonly dir: string;
  readonly version: string;
  readonly linux: string;
  readonly windows: string;
  readonly npm: { readonly main: string; readonly linux: string; readonly windows: string };
}

const repo = new URL('../../../', import.meta.url).pathname;

function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

function releaseKey(): string {
  const h = createHash('sha256');
  const inputs = [
    ...files(join(repo, 'dist', 'src')).filter((f) => f.endsWith('.js') || f.endsWith('.cjs')),
    ...files(join(repo, 'src', 'renderer')),
    ...['package.json', 'package-lock.json', 'LICENSE', 'README.md', 'bin/relay.js', 'scripts/release.mjs', 'scripts/sea.mjs', 'scripts/stage-llama.mjs'].map((f) => join(repo, f)),
    join(installDir(), 'install.json'),
    join(windowsInstallDir(), 'install.json'),
  ];
  for (const f of inputs) h.update(relative(repo, f)).update('\0').update(readFileSync(f)).update('\0');
  return h.digest('hex').slice(0, 16);
}

export async function releaseBuild(): Promise<ReleaseBuild> {
  // The Windows release needs the cross-build (cached, as the Windows tests use it).
  await buildWindows({ progress: (l) => console.error(`[llama win64] ${l}`) });
  const version = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { name: string; version: string }).version;
  const name = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { name: string }).name;
  const base = join(cacheRoot(), 'release-builds');
  const dir = join(base, releaseKey());
  const built: ReleaseBuild = {
    dir,
    version,
    linux: join(dir, `relay-${version}-linux-x64.tar.gz`),
    windows: join(dir, `relay-${version}-win-x64.zip`),
    npm: { main: join(dir, 'npm', `${name}-${version}.tgz`), linux: join(dir, 'npm', `${name}-linux-x64-${version}.tgz`), windows: join(dir, 'npm', `${name}-win32-x64-${version}.tgz`) },
  };
  mkdirSync(base, { recursive: true });
  await withLock(
    join(base, '.lock'),
    (l) => console.error(`[release] ${l}`),
    async () => {
      if (existsSync(join(dir, 'release.json'))) return;
      // The newest build besides this one is kept (another checkout may be using it); older ones are older code.
      const older = readdirSync(base)
        .filter((k) => k !== '.lock' && k !== basename(dir))
        .sort((a, b) => statSync(join(base, b)).mtimeMs - statSync(join(base, a)).mtimeMs);
      for (const old of older.slice(1)) rmSync(join(base, old), { recursive: true, force: true });
      const r = spawnSync(process.execPath, [join(repo, 'scripts', 'release.mjs'), '--out', dir], { cwd: repo, encoding: 'utf8', maxBuffer: 64 << 20 });
      if (r.status !== 0) {
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`scripts/release.mjs failed:\n${r.stdout}\n${r.stderr}`);
      }
    },
  );
  for (const f of [built.linux, built.windows, built.npm.main, built.npm.linux, built.npm.windows]) if (!existsSync(f)) throw new Error(`the release build has no ${f}`);
  return built;
}

/**
 * A minimal Debian root (debootstrap --variant=minbase, from Debian's packages): glibc, libstdc++, coreutils, no
 * Node.js, npm, compiler, git or Python. Made once under the cache; used read-only (each run binds its own
 * folder at /work inside a mount namespace of its own).
 */
export async function minimalRoot(): Promise<string> {
  // debootstrap, and later unshare's namespaces, chroot and mount: as the suite's other mounts, root only.
  if (process.getuid?.() !== 0) throw new Error('the clean-machine release test needs root (debootstrap, unshare --mount, chroot), as the suite runs on these machines');
  const dir = join(cacheRoot(), 'debian-bookworm-minbase-1');
  if (existsSync(join(dir, '.complete'))) return dir;
  await withLock(
    `${dir}.lock`,
    (l) => console.error(`[root] ${l}`),
    () => {
      if (existsSync(join(dir, '.complete'))) return Promise.resolve();
      rmSync(dir, { recursive: true, force: true });
      const mirror = process.env.RELAY_DEBIAN_MIRROR ?? aptMirror() ?? 'http://deb.debian.org/debian';
      const r = spawnSync('debootstrap', ['--variant=minbase', 'bookworm', dir, mirror], { encoding: 'utf8', maxBuffer: 64 << 20 });
      if (r.status !== 0) throw new Error(`debootstrap failed (scripts/install-deps.sh installs it):\n${r.stdout.slice(-2000)}\n${r.stderr}`);
      mkdirSync(join(dir, 'work'), { recursive: true });
      spawnSync('touch', [join(dir, '.complete')]);
      return Promise.resolve();
    },
  );
  return dir;
}

/** The Debian mirror apt uses on this machine (deb822 `URIs:` or a `deb URL bookworm` line), which debootstrap then uses too. */
function aptMirror(): string | null {
  const sources = ['/etc/apt/sources.list', ...listDir('/etc/apt/sources.list.d')];
  for (const f of sources) {
    let text: string;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue; // a folder or an unreadable file: not a source list
    }
    const m = /^URIs:\s*(\S+\/debian)\/?\s*$/m.exec(text) ?? /^deb\s+(?:\[[^\]]*\]\s+)?(\S+\/debian)\/?\s+bookworm\s/m.exec(text);
    if (m) return m[1]!;
  }
  return null;
}

const listDir = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).map((f) => join(dir, f)) : []);

/** A program inside `root` with `work` at /work: a mount and pid namespace of its own (all of it ends with the returned process), a clean environment. */
export function spawnInRoot(root: string, work: string, argv: readonly string[], env: Record<string, string> = {}): ChildProcess {
  const vars = Object.entries({ PATH: '/usr/bin:/bin:/usr/sbin:/sbin', TMPDIR: '/work/tmp', ...env }).map(([k, v]) => `${k}=${v}`);
  mkdirSync(join(work, 'tmp'), { recursive: true });
  const script = 'R="$2"; mount --bind "$1" "$R/work" && mount -t proc proc "$R/proc" && shift 2 && exec chroot "$R" /usr/bin/env -i "$@"';
  return spawn('unshare', ['--mount', '--pid', '--fork', '--kill-child', 'sh', '-c', script, 'sh', work, root, ...vars, ...argv], {
    // The suite's environment (RELAY_TEST_RUN_ID) stays on unshare, outside: its orphan check finds it.
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Run `argv` in the root to its end: its exit code and output. */
export async function runInRoot(root: string, work: string, argv: readonly string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = spawnInRoot(root, work, argv, env);
  let stdout = '';
  let stderr = '';
  p.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  p.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((r) => p.once('close', (c) => r(c)));
  return { code, stdout, stderr };
}

/** Lines of a running program, collected; `waitFor` resolves on the first line that matches (or rejects when it exits). */
export function lines(p: ChildProcess): { all: string[]; waitFor(re: RegExp, limitMs?: number): Promise<string> } {
  const all: string[] = [];
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  for (const s of [p.stdout!, p.stderr!]) {
    createInterface({ input: s }).on('line', (l) => {
      all.push(l);
      for (const w of waiters.filter((x) => x.re.test(l))) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(l);
      }
    });
  }
  return {
    all,
    waitFor(re, limitMs = 120_000) {
      const seen = all.find((l) => re.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const w = { re, resolve: (l: string) => end(() => resolve(l)) };
        const end = (settle: () => void): void => {
          clearTimeout(t);
          p.off('exit', exited);
          if (waiters.includes(w)) waiters.splice(waiters.indexOf(w), 1);
          settle();
        };
        const exited = (code: number | null): void => end(() => reject(new Error(`exited (${code}) before a line matching ${re}:\n${all.slice(-40).join('\n')}`)));
        const t = setTimeout(() => end(() => reject(new Error(`no line matching ${re} in ${limitMs} ms:\n${all.slice(-40).join('\n')}`))), limitMs);
        p.once('exit', exited);
        waiters.push(w);
      });
    },
  };
}

/** Unpack a release archive into `dest` (tar.gz or zip); returns the release's folder. */
export function unpack(archive: string, dest: string): string {
  mkdirSync(dest, { recursive: true });
  const r = archive.endsWith('.zip') ? spawnSync('unzip', ['-q', archive, '-d', dest], { encoding: 'utf8' }) : spawnSync('tar', ['-xzf', archive, '-C', dest], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`unpacking ${archive}: ${r.stderr}`);
  const [top] = readdirSync(dest).filter((f) => statSync(join(dest, f)).isDirectory());
  return join(dest, top!);
}
