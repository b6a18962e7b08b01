#!/usr/bin/env node
// `npm run release`: what a household downloads, built here on Linux x64. Nothing is compiled or fetched on the
// machine that runs it. Into out/release/ (or --out DIR):
//   relay-<version>-linux-x64.tar.gz   relay (one executable), llama/, node_modules/ (koffi, bufferutil), app/
//   relay-<version>-win-x64.zip        the same for Windows: relay.exe, llama/ (the cross-build's .exe and DLLs)
//   npm/relay-llm-<version>.tgz        the npm package (`npm install -g`, command `relay`), whose optional
//   npm/relay-llm-<os>-x64-<version>.tgz  dependencies carry llama.cpp for each OS (esbuild's way)
// Options: --only linux,win,npm (default all)  --cuda 13|12|both|none (the CUDA modules in the Linux release and
// binary package; default 13: CUDA 12's is 374 MB)  --out DIR.
// llama.cpp comes from the cached builds (`relay llama build`, `relay llama build --windows`) or RELAY_LLAMA_BIN_DIR,
// laid out by scripts/stage-llama.mjs with the prebuilt GPU modules; the executable from scripts/sea.mjs.
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { koffiPackage, stage } from './stage-llama.mjs';
import { bundle, RELEASE_NODE, seaBlob, seaExecutable } from './sea.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const OS = { linux: 'linux', win32: 'win' };
const EXE = { linux: 'relay', win32: 'relay.exe' };
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
/** The oldest Linux the release runs on, as the README says (glibc 2.34, GCC 12's libstdc++): checked on every build. */
const LINUX_FLOOR = { GLIBC: '2.34', GLIBCXX: '3.4.30' };

function sh(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.error?.message ?? r.stderr}`);
  return r.stdout;
}

/** The CUDA modules stage-llama adds for --cuda (its RELAY_DIST_CUDA takes one of them at a time). */
function cudaIds(cuda) {
  if (cuda === 'none') return [];
  if (cuda === 'both') return ['13', '12'];
  if (cuda === '13' || cuda === '12') return [cuda];
  throw new Error(`--cuda: 13, 12, both or none (got ${cuda})`);
}

/** llama.cpp for `platform` laid out in `dest`: the binaries and every module the backend choice may load. */
async function llamaFolder(platform, cuda, work, dest, log) {
  const runs = platform === 'linux' && cudaIds(cuda).length > 0 ? cudaIds(cuda) : [undefined];
  for (const [i, id] of runs.entries()) {
    const env = { ...process.env };
    if (id) env.RELAY_DIST_CUDA = id;
    else delete env.RELAY_DIST_CUDA;
    const { dir } = await stage({ platform, arch: 'x64', env, log, out: join(work, `stage-${platform}-${i}`) });
    cpSync(join(dir, 'llama'), dest, { recursive: true });
  }
  for (const lib of platform === 'linux' ? runtimeLibraries(join(dest, 'llama-server')) : []) copyFileSync(lib, join(dest, lib.split('/').pop()));
  if (platform === 'linux') await checkLinuxFloor(dest);
  return JSON.parse(readFileSync(join(work, `stage-${platform}-0`, 'stage.json'), 'utf8'));
}

/** Every shipped library and program needs at most LINUX_FLOOR's symbol versions, or the build says which raised it. */
async function checkLinuxFloor(dir) {
  const { compareVersions } = await import('../dist/src/main/core/pool/versions.js'); // built before a release
  const newer = (a, b) => compareVersions(a, b) > 0;
  const files = readdirSync(dir, { recursive: true }).filter((f) => /(^|\/)(llama-server|ggml-rpc-server|[^/]+\.so(\.\d+)*)$/.test(f));
  for (const f of files) {
    for (const [, lib, v] of sh('objdump', ['-T', join(dir, f)]).matchAll(/\b(GLIBC|GLIBCXX)_(\d+(?:\.\d+)+)\b/g)) {
      if (newer(v, LINUX_FLOOR[lib])) throw new Error(`${f} needs ${lib}_${v}, newer than the ${lib} ${LINUX_FLOOR[lib]} the README promises: build on an older system or update the README`);
    }
  }
}

/**
 * Libraries llama-server needs beyond what every Linux desktop has (glibc, libstdc++): the build's OpenMP runtime,
 * which a minimal system lacks. They go beside it ($ORIGIN is its rpath).
 */
function runtimeLibraries(server) {
  const out = sh('ldd', [server]);
  return [...out.matchAll(/^\s*(libgomp\.so\.\d+) => (\S+)/gm)].map((m) => m[2]);
}

/** koffi (FFI: NVML, library probes) and bufferutil (the tunnel's WebSocket masking) for `platform`, as Node resolves them. */
async function nativeModules(platform, dest, log) {
  const nm = join(root, 'node_modules');
  const skip = (top, parts) => (src) => !parts.some((p) => relative(join(nm, top), src).split(sep)[0] === p);
  cpSync(join(nm, 'koffi'), join(dest, 'koffi'), { recursive: true, filter: skip('koffi', ['doc', 'vendor', 'lib', 'cnoke.cjs']) });
  cpSync(await koffiPackage(platform, 'x64', log), join(dest, '@koromix', `koffi-${platform}-x64`), { recursive: true });
  const other = (src) => {
    const r = relative(join(nm, 'bufferutil'), src).split(sep);
    return !(r[0] === 'build' || r[0] === 'src' || (r[0] === 'prebuilds' && r[1] && r[1] !== `${platform}-x64`));
  };
  cpSync(join(nm, 'bufferutil'), join(dest, 'bufferutil'), { recursive: true, filter: other });
  cpSync(join(nm, 'node-gyp-build'), join(dest, 'node-gyp-build'), { recursive: true });
}

/** app/: what the executable reads beside it (core/app-files.ts): package.json, the dashboard, the workers. */
function appFolder(bundled, dest) {
  mkdirSync(dest, { recursive: true });
  const { name, version, description, license } = pkg;
  writeFileSync(join(dest, 'package.json'), `${JSON.stringify({ name, version, description, license }, null, 2)}\n`);
  cpSync(bundled.workers, join(dest, 'workers'), { recursive: true });
  cpSync(join(root, 'src', 'renderer'), join(dest, 'src', 'renderer'), { recursive: true, filter: (s) => !s.endsWith('README.md') });
}

function readme(platform) {
  const exe = platform === 'win32' ? 'relay.exe' : './relay';
  return [
    `relay ${pkg.version} for ${OS[platform]} x64: pool a household's GPUs for llama.cpp inference.`,
    'Nothing to install: this folder is the whole program (llama.cpp included, Node.js inside the executable).',
    '',
    'The hub (the machine that keeps the models):',
    `  ${exe} hub --listen 0.0.0.0          then open the dashboard it prints`,
    'A node (every other machine): copy the command the dashboard\'s "Add a node…" shows, e.g.',
    `  ${exe} up --token rly1.…`,
    `What this machine has and lends: ${exe} doctor      Every command: ${exe} --help`,
    '',
  ].join(platform === 'win32' ? '\r\n' : '\n');
}

async function portable(platform, { bundled, blob, cuda, work, out, log }) {
  const name = `relay-${pkg.version}-${OS[platform]}-x64`;
  const dir = join(work, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await seaExecutable(platform, blob, join(dir, EXE[platform]), log);
  const staged = await llamaFolder(platform, cuda, work, join(dir, 'llama'), log);
  await nativeModules(platform, join(dir, 'node_modules'), log);
  appFolder(bundled, join(dir, 'app'));
  copyFileSync(join(root, 'LICENSE'), join(dir, 'LICENSE'));
  writeFileSync(join(dir, 'README.txt'), readme(platform));
  const file = join(out, `${name}${platform === 'win32' ? '.zip' : '.tar.gz'}`);
  rmSync(file, { force: true });
  if (platform === 'win32') sh('zip', ['-q', '-r', '-X', file, name], work);
  else sh('tar', ['--owner=0', '--group=0', '--numeric-owner', '-czf', file, name], work);
  return { kind: 'portable', platform, file, bytes: statSync(file).size, llama: staged.version, backends: staged.backends };
}

/** The npm package: the files `npm pack` takes from this checkout (package.json's `files`), its binary packages as optional dependencies. */
function npmMain(platforms, work, out) {
  const dir = join(work, 'npm', pkg.name);
  rmSync(dir, { recursive: true, force: true });
  const listed = JSON.parse(sh('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], root))[0].files.map((f) => f.path);
  for (const f of listed.filter((f) => f !== 'package.json')) {
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    copyFileSync(join(root, f), join(dir, f));
  }
  const published = { ...pkg };
  for (const k of ['private', 'devDependencies', 'scripts']) delete published[k];
  published.optionalDependencies = Object.fromEntries(platforms.map((p) => [`${pkg.name}-${p}-x64`, pkg.version]));
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(published, null, 2)}\n`);
  return pack(dir, out);
}

async function npmBinary(platform, cuda, work, out, log) {
  const name = `${pkg.name}-${platform}-x64`;
  const dir = join(work, 'npm', name);
  rmSync(dir, { recursive: true, force: true });
  await llamaFolder(platform, cuda, join(work, 'npm'), join(dir, 'llama'), log);
  const manifest = {
    name,
    version: pkg.version,
    description: `llama.cpp for ${pkg.name} on ${platform} x64 (llama-server, ggml-rpc-server, the GPU modules)`,
    license: pkg.license,
    os: [platform],
    cpu: ['x64'],
    // Built against glibc: on musl (Alpine) npm skips it, and relay builds llama.cpp from source there.
    ...(platform === 'linux' ? { libc: ['glibc'] } : {}),
    files: ['llama/'],
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return pack(dir, out);
}

function pack(dir, out) {
  mkdirSync(out, { recursive: true });
  const [r] = JSON.parse(sh('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', out], dir));
  const file = join(out, r.filename);
  return { kind: 'npm', platform: null, file, bytes: statSync(file).size };
}

/** Build what `only` names; returns one row per archive. */
export async function release({ only = ['linux', 'win', 'npm'], cuda = '13', out: outArg = join(root, 'out', 'release'), log = (l) => console.error(`release: ${l}`) } = {}) {
  if (process.platform !== 'linux' || process.arch !== 'x64') throw new Error('releases are built on Linux x64');
  const out = resolve(outArg); // tar, zip and npm pack run in other folders
  if (!existsSync(join(root, 'dist', 'src', 'main', 'cli', 'index.js'))) throw new Error('dist/ is missing: npm run build');
  cudaIds(cuda);
  mkdirSync(out, { recursive: true });
  const work = join(out, '.work');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const rows = [];
  const platforms = [only.includes('linux') && 'linux', only.includes('win') && 'win32'].filter(Boolean);
  if (platforms.length > 0) {
    log(`bundling relay ${pkg.version} for Node.js ${RELEASE_NODE.version}`);
    const bundled = await bundle(join(work, 'bundle'));
    const blob = await seaBlob(bundled.app, work, log);
    for (const p of platforms) {
      log(`portable ${OS[p]}-x64`);
      rows.push(await portable(p, { bundled, blob, cuda, work, out, log }));
    }
  }
  if (only.includes('npm')) {
    log('npm packages');
    rows.push(npmMain(['linux', 'win32'], work, join(out, 'npm')));
    for (const p of ['linux', 'win32']) rows.push(await npmBinary(p, cuda, work, join(out, 'npm'), log));
  }
  rmSync(work, { recursive: true, force: true });
  writeFileSync(join(out, 'release.json'), `${JSON.stringify({ version: pkg.version, node: RELEASE_NODE.version, builtAt: new Date().toISOString(), rows }, null, 2)}\n`);
  return rows;
}

function flag(argv, name) {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === realpathSync(process.argv[1])) {
  const argv = process.argv.slice(2);
  try {
    const rows = await release({ only: flag(argv, '--only')?.split(','), cuda: flag(argv, '--cuda'), out: flag(argv, '--out') });
    console.log('| archive | size |\n| --- | --- |');
    for (const r of rows) console.log(`| ${relative(process.cwd(), r.file)} | ${(r.bytes / 1e6).toFixed(1)} MB |`);
  } catch (err) {
    console.error(`release: ${err.message}`);
    process.exit(1);
  }
}
