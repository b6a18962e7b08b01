#!/usr/bin/env node
// `npm start`: the tray app where Electron's binary is installed; otherwise say so and run the headless hub.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFileSync } from 'node:fs';

// Look for the downloaded binary the way the electron package records it (path.txt + dist/), without
// require('electron'), which would try to download it.
let electron = null;
try {
  const dir = new URL('../node_modules/electron/', import.meta.url).pathname;
  const rel = readFileSync(`${dir}path.txt`, 'utf8').trim();
  if (existsSync(`${dir}dist/${rel}`)) electron = `${dir}dist/${rel}`;
} catch {
  /* electron's binary is not installed */
}

const root = new URL('..', import.meta.url).pathname;
if (electron) {
  const child = spawn(electron, [root], { stdio: 'inherit' });
  child.on('exit', (code) => process.exit(code ?? 0));
} else {
  console.error("relay: Electron's binary is not installed here (ELECTRON_SKIP_BINARY_DOWNLOAD, or no download).");
  console.error('relay: starting the headless hub instead; `npx install-electron` (with network access) enables the tray app.');
  const child = spawn(process.execPath, [new URL('../bin/relay.js', import.meta.url).pathname, 'hub', ...process.argv.slice(2)], { stdio: 'inherit' });
  for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => child.kill(s));
  child.on('exit', (code) => process.exit(code ?? 0));
}
