#!/usr/bin/env node
// The `relay` command. The TypeScript sources compile to dist/ (npm ci runs `prepare`, or `npm run build`).
import { existsSync } from 'node:fs';

// What relay uses of Node.js (node:sea among it) came in 20.12: say so, rather than fail on an unknown module.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 20 || (major === 20 && minor < 12)) {
  console.error(`relay needs Node.js 20.12 or newer; this is ${process.version}. (The portable release brings its own.)`);
  process.exit(1);
}

const entry = new URL('../dist/src/main/cli/index.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('relay: dist/ is missing: run `npm run build` (npm ci does it for you).');
  process.exit(1);
}
await import(entry.href);
