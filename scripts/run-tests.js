#!/usr/bin/env node
// Runs every compiled *.test.js under dist/test with node's test runner, then checks that no process the
// suite started (they carry RELAY_TEST_RUN_ID in their environment) is still running. Everything the tests
// and their processes write to the temp dir (hub and node homes, pushed copies, chromium profiles) goes to
// one folder per run, removed at the end (RELAY_KEEP_TEST_TMP=1 keeps it, to look at after a failure).
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
// --screenshots: the dashboard test writes its pictures to docs/ (the README's), not to the run's temp dir.
const screenshots = process.argv.includes('--screenshots');
const only = process.argv.slice(2).filter((a) => a !== '--screenshots');

function collect(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...collect(p));
    else if (e.name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

let files = collect(join(root, 'dist', 'test')).sort();
if (only.length > 0) files = files.filter((f) => only.some((o) => f.includes(o)));
if (files.length === 0) {
  console.error('no test files matched');
  process.exit(1);
}

const runId = randomUUID();
const marker = `RELAY_TEST_RUN_ID=${runId}`;
const runTmp = mkdtempSync(join(tmpdir(), 'relay-test-run-'));
const child = spawn(process.execPath, ['--test', '--test-reporter=spec', ...files], {
  stdio: 'inherit',
  // The suite pins the CPU backend for every hub and node it starts (the temperature-0 oracles are CPU runs);
  // the GPU tests ask for Vulkan on lavapipe explicitly and the detection tests run 'auto' themselves.
  env: { RELAY_LLAMA_BACKEND: 'cpu', ...process.env, RELAY_TEST_RUN_ID: runId, TMPDIR: runTmp, ...(screenshots ? { RELAY_SCREENSHOTS_DIR: join(root, 'docs') } : {}) },
});
const code = await new Promise((resolve) => child.on('close', (c, s) => resolve(c ?? (s ? 1 : 0))));

function leftovers() {
  const found = [];
  if (process.platform !== 'linux') return found;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8');
      if (!env.split('\0').includes(marker)) continue;
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      found.push({ pid: Number(pid), cmd });
    } catch {
      /* gone or not ours */
    }
  }
  return found;
}

const orphans = leftovers();
const removeTmp = () => {
  if (process.env.RELAY_KEEP_TEST_TMP === '1') console.log(`test temp files kept in ${runTmp}`);
  else rmSync(runTmp, { recursive: true, force: true });
};
if (orphans.length > 0) {
  console.error(`\norphan check: FAILED, ${orphans.length} process(es) started by the suite are still running:`);
  for (const o of orphans) {
    console.error(`  ${o.pid} ${o.cmd}`);
    try {
      process.kill(o.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  removeTmp();
  process.exit(1);
}
console.log('orphan check: no llama-server, ggml-rpc-server or helper process from this run is left');
removeTmp();
process.exit(code);
