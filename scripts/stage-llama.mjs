#!/usr/bin/env node
// Stages what the tray app ships as extraResources (electron-builder.yml) for one target into
// .dist-llama/<os>-<arch>/ (os as electron-builder names it: linux, win, mac):
//   llama/: llama-server, ggml-rpc-server and the shared libraries beside them (Linux: the $ORIGIN layout;
//     Windows: the .exe files with their DLLs and the mingw runtime, which Windows looks for beside the program),
//     and llama/backends/<package id>/<module>: the prebuilt GPU modules that fit the target, fetched through the
//     npm registry and integrity-checked (Linux x64: Vulkan always, CUDA 13 / CUDA 12 when RELAY_DIST_CUDA=13 /
//     12, as each is 160-370 MB; Windows x64: Vulkan). The app picks one at start like `relay hub` does.
//   koffi/<platform>_<arch>/koffi.node (Windows only): koffi's native module for the target, which npm installed
//     only for this machine (an optional dependency per platform); koffi looks for it under resources/koffi.
// Source of the binaries: RELAY_LLAMA_BIN_DIR, else the cached build (`npx relay llama build`; for Windows the
// cross-build, `npx relay llama build --windows`).
// electron-builder runs this as its beforePack hook for each platform it packs (`npm run dist -- --win`);
// by hand: `node scripts/stage-llama.mjs [--win|--linux] [--arch x64]`.
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { registryPackage } from './sea.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lib = (f) => import(join(root, 'dist', 'src', 'main', 'core', 'llama', f));
const OS = { linux: 'linux', win32: 'win', darwin: 'mac' };

/** The folder electron-builder.yml's extraResources read for a target (`${os}-${arch}`). */
export const stageDir = (platform, arch) => join(root, '.dist-llama', `${OS[platform]}-${arch}`);

async function binaries(platform, env) {
  const { binariesIn, findLlama, readVersion, shippedFileRule } = await lib('install.js');
  const { findWindowsLlama } = await lib('build-windows.js');
  if (env.RELAY_LLAMA_BIN_DIR) {
    const { serverPath } = binariesIn(env.RELAY_LLAMA_BIN_DIR, platform);
    const version = platform === process.platform ? readVersion(serverPath) : 'not run here (another platform)';
    return { binDir: env.RELAY_LLAMA_BIN_DIR, version, shipped: shippedFileRule(platform) };
  }
  if (platform === 'win32') {
    const win = findWindowsLlama(env);
    if (!win) throw new Error('no Windows binaries: run `npx relay llama build --windows` or set RELAY_LLAMA_BIN_DIR');
    const tag = JSON.parse(readFileSync(join(dirname(win.dir), 'install.json'), 'utf8')).tag;
    return { binDir: win.dir, version: `${tag} (cross-built, mingw-w64)`, shipped: shippedFileRule(platform) };
  }
  if (platform !== process.platform) throw new Error(`no ${platform} binaries to ship: set RELAY_LLAMA_BIN_DIR to a ${platform} build`);
  const install = findLlama({ env });
  if (!install) throw new Error('no llama.cpp binaries: run `npx relay llama build` or set RELAY_LLAMA_BIN_DIR');
  return { binDir: install.binDir, version: install.version, shipped: shippedFileRule(platform) };
}

/** koffi's platform package for the target (the @koromix one package-lock.json pins): the installed one, else fetched and verified. */
export async function koffiPackage(platform, arch, log = (l) => console.error(`stage-llama: ${l}`), env = process.env) {
  const name = `@koromix/koffi-${platform}-${arch}`;
  const locked = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')).packages[`node_modules/${name}`];
  if (!locked?.integrity) throw new Error(`package-lock.json pins no ${name}`);
  const installed = join(root, 'node_modules', name);
  return existsSync(join(installed, 'package.json')) ? installed : registryPackage(name, locked.version, locked.integrity, log, env);
}

/** koffi's native module for the target. */
export async function koffiModule(platform, arch, log = (l) => console.error(`stage-llama: ${l}`), env = process.env) {
  const file = join(await koffiPackage(platform, arch, log, env), `${platform}_${arch}`, 'koffi.node');
  if (!existsSync(file)) throw new Error(`koffi's ${platform}-${arch} package has no ${platform}_${arch}/koffi.node`);
  return file;
}

/** Stage `platform`-`arch` (Node's names); returns the folder and one line saying what is in it. */
export async function stage({ platform = process.platform, arch = process.arch, env = process.env, log = (l) => console.error(`stage-llama: ${l}`), out = stageDir(platform, arch) } = {}) {
  if (!OS[platform]) throw new Error(`cannot stage for ${platform}`);
  const { BACKEND_PACKAGES } = await lib('backend-choice.js');
  const { ensurePackageModule, moduleFileName } = await lib('backends.js');
  const { binDir, version, shipped } = await binaries(platform, env);
  const { binaryNames } = await lib('install.js');
  const names = Object.values(binaryNames(platform));
  for (const n of names) if (!existsSync(join(binDir, n))) throw new Error(`${binDir} has no ${n}`);
  const work = `${out}.work-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(work, 'llama'), { recursive: true });
  const files = readdirSync(binDir).filter(shipped);
  for (const f of files) {
    copyFileSync(join(binDir, f), join(work, 'llama', f));
    if (platform !== 'win32') chmodSync(join(work, 'llama', f), 0o755);
  }
  const cuda = env.RELAY_DIST_CUDA;
  const wanted = BACKEND_PACKAGES.filter((p) => p.platform === platform && p.arch === arch).filter(
    (p) => p.backend !== 'cuda' || (cuda === '13' && p.id === 'cuda13') || (cuda === '12' && p.id === 'cuda12'),
  );
  const backends = [];
  for (const p of wanted) {
    const module = await ensurePackageModule(p, env, log).catch((err) => {
      throw new Error(`${p.package}@${p.version}: ${err.message}`);
    });
    mkdirSync(join(work, 'llama', 'backends', p.id), { recursive: true });
    copyFileSync(module, join(work, 'llama', 'backends', p.id, moduleFileName(p.backend, platform)));
    backends.push(`${p.id} (${p.package}@${p.version})`);
  }
  if (platform === 'win32') {
    const koffi = await koffiModule(platform, arch, log, env);
    mkdirSync(join(work, 'koffi', `${platform}_${arch}`), { recursive: true });
    copyFileSync(koffi, join(work, 'koffi', `${platform}_${arch}`, 'koffi.node'));
  }
  const manifest = { platform, arch, from: binDir, version, files: files.sort(), backends, stagedAt: new Date().toISOString() };
  writeFileSync(join(work, 'stage.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  rmSync(out, { recursive: true, force: true });
  renameSync(work, out);
  const line = `${files.length} files from ${binDir} (llama.cpp ${version}) → ${out}/llama; backends: ${backends.join(', ') || 'none for this platform'}${platform === 'win32' ? `; koffi ${platform}_${arch}` : ''}`;
  return { dir: out, line };
}

/** electron-builder's beforePack hook: stage for the platform and arch being packed. */
export async function beforePack(context) {
  const { Arch } = await import('builder-util');
  const { line } = await stage({ platform: context.electronPlatformName, arch: Arch[context.arch] });
  console.log(`  • stage-llama  ${line}`);
}
export default beforePack;

if (process.argv[1] && fileURLToPath(import.meta.url) === realpathSync(process.argv[1])) {
  const argv = process.argv.slice(2);
  const platform = argv.includes('--win') ? 'win32' : argv.includes('--linux') ? 'linux' : argv.includes('--mac') ? 'darwin' : process.platform;
  const arch = argv.includes('--arch') ? argv[argv.indexOf('--arch') + 1] : process.arch;
  try {
    console.log(`stage-llama: ${(await stage({ platform, arch })).line}`);
  } catch (err) {
    console.error(`stage-llama: ${err.message}`);
    process.exit(1);
  }
}
