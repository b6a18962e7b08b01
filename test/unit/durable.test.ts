import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { durableWriteSteps, readDurable, writeDurable } from '../../src/main/core/durable.js';
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
    assert.equal(readFileSync(`${p}.unreadable`, 'utf8'), '{"n":', 'the unreadable file is set aside');
    writeFileSync(p, '{"n":');
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

  it('a crash after any step of a write leaves the committed state or the new one, never an older one or none', () => {
    const steps = durableWriteSteps('/x', '').map((s) => s.what);
    for (let k = 0; k <= steps.length; k++) {
      const p = join(mkdtempSync(join(tmpdir(), 'relay-durable-')), 'state.json');
      writeDurable(p, '{"n":1}');
      writeDurable(p, '{"n":2}'); // committed: the caller was told
      for (const step of durableWriteSteps(p, '{"n":3}').slice(0, k)) step.run(); // then the power goes
      assert.ok(existsSync(p), `a current file exists after "${steps[k - 1] ?? 'nothing'}"`);
      const r = readDurable(p, parse)!;
      assert.equal(r.recovered, null, `no recovery needed after "${steps[k - 1] ?? 'nothing'}"`);
      assert.ok([2, 3].includes(r.value.n), `after "${steps[k - 1] ?? 'nothing'}": ${r.value.n}`);
      if (k >= steps.indexOf('rename the temp file over the current file') + 1) assert.equal(r.value.n, 3);
      // The next write after the restart commits as usual.
      writeDurable(p, '{"n":4}');
      assert.deepEqual(readDurable(p, parse)!.value, { n: 4 });
    }
  });

  it('a recovery never makes the unreadable file the last good copy', () => {
    const p = join(mkdtempSync(join(tmpdir(), 'relay-durable-')), 'state.json');
    writeDurable(p, '{"n":1}');
    writeDurable(p, '{"n":2}');
    writeFileSync(p, '{"n":'); // torn by something else
    assert.deepEqual(readDurable(p, parse)!.value, { n: 1 });
    assert.equal(readFileSync(`${p}.unreadable`, 'utf8'), '{"n":', 'kept aside, to look at');
    for (const step of durableWriteSteps(p, '{"n":3}').slice(0, 3)) step.run(); // a crash before the new file lands
    assert.deepEqual(readDurable(p, parse)!.value, { n: 1 }, 'the good copy is still there');
    writeDurable(p, '{"n":3}');
    assert.equal(readFileSync(`${p}.bak`, 'utf8'), '{"n":1}');
    assert.deepEqual(readDurable(p, parse), { value: { n: 3 }, recovered: null });
  });

  it('a store update whose write fails (or whose change throws) changes nothing, in memory or on disk', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-durable-'));
    const s = await Store.open(home);
    await s.update((d) => {
      d.used_join_tokens = ['a'];
    });
    mkdirSync(join(home, 'relay.json.tmp')); // the temp file cannot be written: what a full disk does
    await assert.rejects(
      s.update((d) => {
        d.used_join_tokens!.push('b');
      }),
    );
    assert.deepEqual(s.data.used_join_tokens, ['a'], 'memory unchanged');
    await assert.rejects(
      s.update((d) => {
        d.used_join_tokens!.push('c');
        throw new Error('refused half-way');
      }),
      /refused half-way/,
    );
    assert.deepEqual(s.data.used_join_tokens, ['a']);
    await s.close();
    const again = await Store.open(home);
    assert.deepEqual(again.data.used_join_tokens, ['a'], 'disk unchanged');
    await again.close();
  });
});
