/**
 * `npm run bench [-- NAME…]`: runs the named benchmarks (default: all), each printing its own tables, then
 * the performance targets they measured in one table.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { targetTable } from './targets.js';

// What the benchmarks and their hubs and nodes write to the temp dir goes to one folder, removed on exit.
const benchTmp = mkdtempSync(join(tmpdir(), 'relay-bench-run-'));
process.env.TMPDIR = benchTmp;
process.on('exit', () => rmSync(benchTmp, { recursive: true, force: true }));

const ALL = ['hub-overhead', 'tunnel', 'shard', 'scale', 'conversations', 'speculative', 'spec', 'plan', 'slot-restore', 'migrate', 'share', 'rpc-fill', 'push-large', 'link', 'release'];
const names = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ALL;
for (const n of names) {
  if (!ALL.includes(n)) throw new Error(`unknown benchmark "${n}" (${ALL.join(', ')})`);
  console.log(`\n=== bench/${n} (${new Date().toISOString()}) ===`);
  await import(`./${n}.js`);
}

const table = targetTable();
if (table.length > 0) {
  console.log(`\n=== targets (${new Date().toISOString().slice(0, 10)}, ${availableParallelism()} cores, ${cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB) ===\n`);
  for (const l of table) console.log(l);
}
