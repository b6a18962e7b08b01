#!/usr/bin/env node
// Stages what the tray app ships as extraResources (resources/llama, electron-builder.yml) into .dist-llama/:
//   llama-server, ggml-rpc-server and the shared libraries beside them (the $ORIGIN layout: they find each
//   other wherever the folder lands), and
//   backends/<package id>/libggml-<backend>.so: the prebuilt GPU modules that fit the target, fetched through
//   the npm registry and integrity-checked (Linux x64: Vulkan always; CUDA 13 / CUDA 12 when
//   RELAY_DIST_CUDA=13 / 12, as each is 160-370 MB). The app picks one at start like `relay hub` does.
// Source: RELAY_LLAMA_BIN_DIR, else the cached build (`npx relay llama build`).
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const lib = (f) => import(join(root, 'dist', 'src', 'main', 'core', 'llama', f));
const { findLlama, isShippedFile } = await lib('install.js');
const { BACKEND_PACKAGES } = await lib('backend-choice.js');
const { ensurePackageModule, moduleFileName } = await lib('backends.js');
const out = join(root, '.dist-llama');

let install;
try {
  install = findLlama();
} catch (err) {
  console.error(`stage-llama: ${err.message}`);
  process.exit(1);
}
if (!install) {
  console.error('stage-llama: no llama.cpp binaries: run `npx relay llama build` or set RELAY_LLAMA_BIN_DIR');
  process.exit(1);
}
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const files = readdirSync(install.binDir).filter(isShippedFile);
for (const f of files) {
  copyFileSync(join(install.binDir, f), join(out, f));
  if (!f.endsWith('.dll')) chmodSync(join(out, f), 0o755);
}
for (const need of [install.serverPath, install.rpcServerPath]) {
  if (!existsSync(join(out, basename(need)))) {
    console.error(`stage-llama: ${need} was not copied`);
    process.exit(1);
  }
}

const cuda = process.env.RELAY_DIST_CUDA;
const wanted = BACKEND_PACKAGES.filter((p) => p.platform === process.platform && p.arch === process.arch).filter(
  (p) => p.backend !== 'cuda' || (cuda === '13' && p.id === 'cuda13') || (cuda === '12' && p.id === 'cuda12'),
);
const shipped = [];
for (const p of wanted) {
  try {
    const module = await ensurePackageModule(p, process.env, (l) => console.error(`stage-llama: ${l}`));
    mkdirSync(join(out, 'backends', p.id), { recursive: true });
    copyFileSync(module, join(out, 'backends', p.id, moduleFileName(p.backend)));
    shipped.push(`${p.id} (${p.package}@${p.version})`);
  } catch (err) {
    console.error(`stage-llama: ${p.package}@${p.version}: ${err.message}`);
    process.exit(1);
  }
}
console.log(`stage-llama: ${files.length} files from ${install.binDir} (llama.cpp ${install.version}) → .dist-llama/; backends: ${shipped.join(', ') || 'none for this platform'}`);
