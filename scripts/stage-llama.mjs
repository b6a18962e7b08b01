#!/usr/bin/env node
// Copies the llama.cpp binaries the tray app ships (llama-server, ggml-rpc-server and any shared libraries
// beside them) into .dist-llama/, which electron-builder.yml packs as extraResources (resources/llama).
// Source: RELAY_LLAMA_BIN_DIR, else the cached build of RELAY_LLAMA_BACKEND (default cpu; `npx relay llama build --backend …`).
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { findLlama } = await import(join(root, 'dist', 'src', 'main', 'core', 'llama', 'install.js'));
const out = join(root, '.dist-llama');

let install;
try {
  install = findLlama({ backend: process.env.RELAY_LLAMA_BACKEND ?? 'cpu' });
} catch (err) {
  console.error(`stage-llama: ${err.message}`);
  process.exit(1);
}
if (!install) {
  console.error('stage-llama: no llama.cpp binaries: run `npx relay llama build [--backend cuda|vulkan|metal]` or set RELAY_LLAMA_BIN_DIR');
  process.exit(1);
}
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const wanted = (f) => /^(llama-server|ggml-rpc-server)(\.exe)?$/.test(f) || /\.(so(\.\d+)*|dylib|dll|metal)$/.test(f);
const files = readdirSync(install.binDir).filter(wanted);
for (const f of files) {
  copyFileSync(join(install.binDir, f), join(out, f));
  if (!f.endsWith('.dll')) chmodSync(join(out, f), 0o755);
}
for (const need of [install.serverPath, install.rpcServerPath]) {
  if (!existsSync(join(out, need.split(/[\\/]/).pop()))) {
    console.error(`stage-llama: ${need} was not copied`);
    process.exit(1);
  }
}
console.log(`stage-llama: ${files.length} files from ${install.binDir} (llama.cpp ${install.version}) → .dist-llama/`);
