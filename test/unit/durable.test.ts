import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { readDurable, writeDurable } from '../../src/main/core/durable.js';
import { Store } from '../../src/main/core/store/store.js';

/** State files survive a torn write: the last good copy is kept and used, and the hub says so. */
describe('durable state files', () => {
  const parse = (t: string): { n: number } => JSON.parse(t) as { n: number };

  it('each write keeps the previous file as the last good copy; a torn current file reads from it', () => {
    const p = join(mkdtempSync(join(tmpdir(), 'relay-durable-')), 'state.json');
    assert.equal(readDurable(p, parse), null);
    writeDurable(p, '{"n":1}');
    writeDurable(p, '{"n":2}');
    assert.deepEqual(readDurable(p, parse), { value: { n: 2 }, recovered: null });
    assert.equal(readFileSync(`${p}.bak`, 'utf8'), '{"n":1}');
    truncateSync(p, 0); // what a crash between create and write leaves
    const r = readDurable(p, parse)!;
    assert.deepEqual(r.value, { n: 1 });
    assert.match(r.recovered!, /state\.json is unreadable \(.*is empty\)/);
    writeFileSync(p, '{"n":'); // half a file
    assert.deepEqual(readDurable(p, parse)!.value, { n: 1 });
    writeFileSync(`${p}.bak`, 'garbage');
    assert.throws(() => readDurable(p, parse), SyntaxError, "both bad: the file's own error, nothing touched");
    assert.equal(readFileSync(p, 'utf8'), '{"n":');
  });

  it('a zero-length relay.json at start: the hub starts from relay.json.bak with its models, and rewrites the file', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-durable-'));
    const s1 = await Store.open(home);
    await s1.update((d) => {
      d.used_join_tokens = ['a'];
    });
    await s1.update((d) => {
      d.used_join_tokens = ['a', 'b'];
    });
    await s1.close();
    truncateSync(join(home, 'relay.json'), 0);
    const s2 = await Store.open(home);
    assert.match(s2.recovered!, /is empty/);
    assert.deepEqual(s2.data.used_join_tokens, ['a'], 'the last good copy');
    assert.ok(readFileSync(join(home, 'relay.json'), 'utf8').length > 0, 'rewritten at once');
    await s2.close();
    const s3 = await Store.open(home);
    assert.equal(s3.recovered, null);
    await s3.close();
  });

  it('a zero-length relay.json without a last good copy is refused with its path and left alone', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-durable-'));
    writeFileSync(join(home, 'relay.json'), '');
    await assert.rejects(Store.open(home), (e: Error & { code?: string }) => e.code === 'STORE_UNREADABLE' || /relay\.json/.test(e.message));
    assert.equal(readFileSync(join(home, 'relay.json'), 'utf8'), '');
  });
});
