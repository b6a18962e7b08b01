import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, it } from 'node:test';
import { Store } from '../../src/main/core/store/store.js';

/**
 * A hub killed with SIGKILL in the middle of its store writes, again and again, never loses a join it had
 * committed: the writer prints each node's name after its update resolved and is killed at a random moment,
 * and the store is opened again after every kill. The worst moment is between two renames of one write: strace
 * holds the writer for 20 ms after every rename(2) returns (syscall fault injection, nothing inside relay), so
 * most kills land exactly there. The unit test in test/unit/durable.test.ts crashes after each step of one
 * write; this is the same against a real process.
 */
const writer = new URL('../helpers/store-writer.js', import.meta.url).pathname;

async function runAndKill(home: string, afterLines: number, extraMs: number): Promise<string[]> {
  const proc = spawn('strace', ['-f', '-qq', '-o', '/dev/null', '-e', 'trace=rename,renameat,renameat2', '-e', 'inject=rename,renameat,renameat2:delay_exit=20000', process.execPath, writer, home], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let writerPid = 0;
  createInterface({ input: proc.stdout }).on('line', (l) => {
    if (l.startsWith('pid ')) return void (writerPid = Number(l.slice(4)));
    lines.push(l);
    // SIGKILL to the writer itself (strace's child) a random moment into a later write.
    if (lines.length === afterLines) setTimeout(() => process.kill(writerPid, 'SIGKILL'), extraMs);
  });
  await exited;
  return lines;
}

describe('the store under SIGKILL', { timeout: 120_000 }, () => {
  it('30 kills at random moments during joins, most between two renames: every committed join is there after each restart', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-store-crash-'));
    const committed = new Set<string>();
    for (let round = 0; round < 30; round++) {
      const lines = await runAndKill(home, 1 + Math.floor(Math.random() * 5), Math.random() * 80);
      assert.ok(!lines.some((l) => l.startsWith('recovered')), `round ${round}: the store was read without a recovery`);
      for (const l of lines) committed.add(l);
      assert.ok(existsSync(join(home, 'relay.json')), 'a current file exists after every kill');
      const s = await Store.open(home);
      const names = new Set(s.data.nodes.map((n) => n.name));
      for (const c of committed) assert.ok(names.has(c), `round ${round}: committed join ${c} is in the store`);
      assert.equal(s.recovered, null);
      await s.close();
    }
    assert.ok(committed.size >= 30);
  });
});
