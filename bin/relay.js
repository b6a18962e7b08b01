#!/usr/bin/env node
// The `relay` command. The TypeScript sources compile to dist/ (npm ci runs `prepare`, or `npm run build`).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/main/cli.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('relay: dist/ is missing: run `npm run build` (npm ci does it for you).');
  process.exit(1);
}
await import(entry.href);
