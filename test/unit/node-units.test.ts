import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { parseHubMessage, parseNodeMessage, parseStreamHeader } from '../../src/shared/protocol-validate.js';
import { PROTOCOL_VERSION } from '../../src/shared/protocol.js';
import { checkJoinToken, mintJoinToken } from '../../src/main/core/pairing/tokens.js';
import { AutoPause, availabilityOf, inPauseWindow, parseSchedule } from '../../src/main/core/availability.js';
import { ModelCache } from '../../src/main/core/node/cache/cache.js';
import { deviceInfo } from '../../src/main/core/node/reports.js';
import { cacheBudgetFlag } from '../../src/main/cli/cache.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const tmp = () => mkdtempSync(join(tmpdir(), 'relay-cache-'));

describe('protocol validation', () => {
  it('accepts well-formed messages and names what is wrong with the rest', () => {
    const hello = {
      type: 'hello',
      protocol: PROTOCOL_VERSION,
      node: 'n1',
      llama: 'v',
      devices: [{ id: 'CPU', kind: 'cpu', description: 'x', totalMb: 1, freeMb: 1 }],
      cache: [],
      partials: [],
      replicas: [],
      availability: 'idle',
      reason: null,
    };
    assert.deepEqual(parseNodeMessage(JSON.stringify(hello)), { ok: true, msg: hello });
    assert.deepEqual(parseNodeMessage('{nope'), { ok: false, code: 'bad_json', message: 'not JSON: {nope' });
    assert.equal((parseNodeMessage('{"type":"launch-missiles"}') as { code: string }).code, 'unknown_type');
    assert.equal((parseNodeMessage('[1]') as { code: string }).code, 'bad_message');
    assert.equal((parseNodeMessage(JSON.stringify({ ...hello, devices: 'all' })) as { code: string }).code, 'bad_message');
    assert.equal((parseNodeMessage(JSON.stringify({ ...hello, availability: 'asleep' })) as { code: string }).code, 'bad_message');
    // Direction matters: a node may not send commands, the hub may not send hellos.
    assert.equal((parseNodeMessage('{"type":"stop-replica","id":1,"replica":"r"}') as { code: string }).code, 'unknown_type');
    assert.equal((parseHubMessage(JSON.stringify(hello)) as { code: string }).code, 'unknown_type');
  });

  it("a device's report: free memory dated by its age, its memory's bandwidth only where the driver told it", () => {
    const gpu = { id: 'CUDA0', kind: 'gpu', description: 'RTX 4070 SUPER', totalMb: 12282, reportedFreeMb: 11000, utilizationPct: 3, source: 'nvml', busId: null, readAt: 900 } as const;
    assert.deepEqual(deviceInfo({ ...gpu, memGBps: 504.048 }, 1000), { id: 'CUDA0', kind: 'gpu', description: 'RTX 4070 SUPER', totalMb: 12282, freeMb: 11000, ageMs: 100, memGBps: 504.048 });
    assert.equal('memGBps' in deviceInfo(gpu, 800), false);
    assert.equal(deviceInfo(gpu, 800).ageMs, 0, 'a reading from the future is not older than now');
    const hello = { type: 'hello', protocol: PROTOCOL_VERSION, node: 'n1', llama: 'v', cache: [], partials: [], replicas: [], availability: 'idle', reason: null };
    assert.equal(parseNodeMessage(JSON.stringify({ ...hello, devices: [deviceInfo({ ...gpu, memGBps: 504 }, 1000)] })).ok, true);
    for (const bad of [-1, 'fast', null]) assert.equal(parseNodeMessage(JSON.stringify({ ...hello, devices: [{ ...deviceInfo(gpu, 1000), memGBps: bad }] })).ok, false, String(bad));
  });

  it('commands carry only safe identifiers: a path in a sha256 or replica id is refused', () => {
    const push = { type: 'push-begin', id: 1, sha256: 'a'.repeat(64), size: 10 };
    assert.equal(parseHubMessage(JSON.stringify(push)).ok, true);
    assert.equal(parseHubMessage(JSON.stringify({ ...push, sha256: '../../etc/passwd' })).ok, false);
    assert.equal(parseHubMessage(JSON.stringify({ type: 'stop-replica', id: 1, replica: '../x' })).ok, false);
    assert.equal(parseStreamHeader(JSON.stringify({ kind: 'file', sha256: `${'a'.repeat(63)}/`, offset: 0, size: 1 })), null);
    assert.equal(parseStreamHeader(JSON.stringify({ kind: 'file', sha256: 'a'.repeat(64), offset: 5, size: 1 })), null);
    assert.deepEqual(parseStreamHeader('{"kind":"http","replica":"r1"}'), { kind: 'http', replica: 'r1' });
    assert.equal(parseStreamHeader('{"kind":"shell"}'), null);
    // A kept conversation's stream names a replica and a slot, never a path; a put says its size and hash.
    assert.deepEqual(parseStreamHeader('{"kind":"slot","op":"get","replica":"r1","slot":0}'), { kind: 'slot', op: 'get', replica: 'r1', slot: 0 });
    const put = { kind: 'slot', op: 'put', replica: 'r1', slot: 1, size: 10, sha256: 'a'.repeat(64) };
    assert.deepEqual(parseStreamHeader(JSON.stringify(put)), put);
    assert.equal(parseStreamHeader(JSON.stringify({ ...put, replica: '../etc/passwd' })), null);
    assert.equal(parseStreamHeader(JSON.stringify({ ...put, sha256: undefined })), null);
    assert.equal(parseStreamHeader(JSON.stringify({ ...put, op: 'delete' })), null);
    assert.equal(parseStreamHeader(JSON.stringify({ ...put, slot: -1 })), null);
  });

  it("start-rpc may describe its stage (for the node's status line); a malformed description is refused", () => {
    const rpc = { type: 'start-rpc', id: 3, rpc: 'r1-0', cache: true };
    assert.equal(parseHubMessage(JSON.stringify(rpc)).ok, true, 'the stage is optional (older hubs)');
    const stage = { model: 'big', index: 0, of: 2, layers: [0, 2] };
    assert.equal(parseHubMessage(JSON.stringify({ ...rpc, stage })).ok, true);
    assert.equal(parseHubMessage(JSON.stringify({ ...rpc, stage: { ...stage, model: '<script>' } })).ok, false);
    assert.equal(parseHubMessage(JSON.stringify({ ...rpc, stage: { ...stage, layers: [0] } })).ok, false);
    assert.equal(parseHubMessage(JSON.stringify({ ...rpc, stage: { ...stage, of: -1 } })).ok, false);
  });
});

describe('join tokens', () => {
  it("verify with the hub's secret only, and expire", () => {
    const secret = Buffer.alloc(32, 7);
    const t = mintJoinToken(secret, 1000, 60_000);
    assert.equal(checkJoinToken(secret, t, 2000).ok, true);
    assert.deepEqual(checkJoinToken(secret, t, 70_000), { ok: false, why: 'the token has expired' });
    assert.deepEqual(checkJoinToken(Buffer.alloc(32, 8), t, 2000), { ok: false, why: 'the token was not issued by this hub' });
    const [p, payload, mac] = t.split('.');
    const forged = `${p}.${Buffer.from(JSON.stringify({ id: 'x', exp: 9e15 })).toString('base64url')}.${mac}`;
    assert.equal(checkJoinToken(secret, forged, 2000).ok, false);
    assert.equal(checkJoinToken(secret, `${p}.${payload}`, 2000).ok, false);
  });
});

describe('availability', () => {
  it('parses a weekly schedule and knows when it pauses, across midnight too', () => {
    const w = parseSchedule('mon-fri 09:00-17:30; sat 22:00-07:00');
    const at = (iso: string) => new Date(iso); // local time
    assert.equal(inPauseWindow(w, at('2026-11-30T10:00:00')), true); // Monday
    assert.equal(inPauseWindow(w, at('2026-11-30T17:30:00')), false);
    assert.equal(inPauseWindow(w, at('2026-11-30T08:59:00')), false);
    assert.equal(inPauseWindow(w, at('2026-12-05T23:00:00')), true); // Saturday night
    assert.equal(inPauseWindow(w, at('2026-12-06T06:59:00')), true); // Sunday morning, same window
    assert.equal(inPauseWindow(w, at('2026-12-06T07:00:00')), false);
    assert.equal(inPauseWindow(w, at('2026-12-06T12:00:00')), false); // Sunday noon
    assert.deepEqual(parseSchedule(''), []);
    assert.throws(() => parseSchedule('someday 09:00-10:00'), /unknown day/);
    assert.throws(() => parseSchedule('mon 9-10'), /bad schedule entry/);
  });

  it('paused wins: owner, then schedule, then auto-pause; otherwise busy while streams are active', () => {
    const base = { manualPause: false, scheduled: false, autoPaused: false, activeStreams: 0 };
    assert.deepEqual(availabilityOf(base), { state: 'idle', reason: null });
    assert.deepEqual(availabilityOf({ ...base, activeStreams: 2 }), { state: 'busy', reason: null });
    assert.equal(availabilityOf({ ...base, scheduled: true, activeStreams: 2 }).reason, 'outside the sharing schedule');
    assert.equal(availabilityOf({ ...base, manualPause: true, scheduled: true }).reason, 'paused by the owner');
    assert.equal(availabilityOf({ ...base, autoPaused: true }).state, 'paused');
  });

  it('auto-pause has hysteresis: a short spike does not pause, a sustained one does, and it resumes only after a quiet spell', () => {
    const ap = new AutoPause({ thresholdMb: 500, pauseAfterMs: 30_000, resumeAfterMs: 60_000 });
    const seq: [number, number, boolean][] = [
      [0, 100, false],
      [5_000, 2000, false],
      [10_000, 100, false], // spike of 5 s: no pause
      [20_000, 2000, false],
      [49_000, 2000, false],
      [50_000, 2000, true], // sustained 30 s: pause
      [60_000, 100, true],
      [100_000, 2000, true],
      [110_000, 100, true],
      [169_000, 100, true],
      [170_000, 100, false], // resume after 60 s quiet
    ];
    for (const [t, mb, want] of seq) assert.equal(ap.update(mb, t), want, `t=${t} mb=${mb}`);
  });
});

describe('model cache', () => {
  const data = Buffer.from('GGUF pretend weights '.repeat(1000));
  const h = sha(data);

  it('names files by validated sha256 only: nothing can land outside the cache dir', () => {
    const c = new ModelCache(tmp(), 0);
    for (const bad of ['../../etc/passwd', `${'a'.repeat(63)}/`, 'A'.repeat(64), '']) {
      assert.throws(
        () => c.pathOf(bad),
        (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT'),
      );
      assert.throws(
        () => c.partialOf(bad),
        (e: unknown) => isRelayError(e, 'INVALID_ARGUMENT'),
      );
    }
  });

  it('receives in two parts (resume), verifies, and moves into place', async () => {
    const c = new ModelCache(tmp(), 0);
    await assert.rejects(c.receive(Readable.from([data.subarray(0, 5000)]), h, 0, data.length), (e: unknown) => isRelayError(e, 'PUSH_INCOMPLETE'));
    assert.equal(c.resumeOffset(h, data.length), 5000);
    await c.receive(Readable.from([data.subarray(5000)]), h, 5000, data.length);
    assert.equal(c.has(h), true);
    assert.equal(c.resumeOffset(h, data.length), null);
    assert.deepEqual(c.inventory(), [{ sha256: h, size: data.length }]);
    assert.deepEqual(c.partials(), []);
  });

  it('rejects bytes that do not hash right and removes the partial file', async () => {
    const c = new ModelCache(tmp(), 0);
    const bad = Buffer.from(data);
    bad[100] = bad[100]! ^ 1;
    await assert.rejects(c.receive(Readable.from([bad]), h, 0, data.length), (e: unknown) => isRelayError(e, 'HASH_MISMATCH'));
    assert.equal(c.has(h), false);
    assert.deepEqual(c.partials(), []);
  });

  it('a full disk gives DISK_FULL and removes the partial file', async () => {
    const c = new ModelCache(tmp(), 0);
    symlinkSync('/dev/full', c.partialOf(h)); // writes to /dev/full fail with ENOSPC
    await assert.rejects(c.receive(Readable.from([data]), h, 0, data.length), (e: unknown) => isRelayError(e, 'DISK_FULL'));
    assert.equal(existsSync(c.partialOf(h)), false);
  });

  it('a cache budget evicts least-recently-used files not in use, and refuses what cannot fit', async () => {
    const dir = tmp();
    const c = new ModelCache(dir, 3 * 1024);
    const files = [0, 1, 2].map((i) => Buffer.alloc(1024, i));
    for (const [i, f] of files.entries()) {
      await c.receive(Readable.from([f]), sha(f), 0, f.length);
      utimesSync(c.pathOf(sha(f)), new Date(1000 * (i + 1)), new Date(1000 * (i + 1)));
    }
    c.inUse.add(sha(files[0]!)); // oldest, but in use
    const next = Buffer.alloc(1024, 9);
    await c.receive(Readable.from([next]), sha(next), 0, next.length);
    const left = readdirSync(join(dir, 'models'))
      .map((f) => f.slice(0, 64))
      .sort();
    assert.deepEqual(left, [sha(files[0]!), sha(files[2]!), sha(next)].sort()); // files[1] was the LRU not in use
    const huge = Buffer.alloc(8 * 1024, 1);
    await assert.rejects(c.receive(Readable.from([huge]), sha(huge), 0, huge.length), (e: unknown) => isRelayError(e, 'CACHE_FULL'));
    writeFileSync(join(dir, 'models', 'notes.txt'), 'ignored'); // foreign files are not inventory
    assert.equal(c.inventory().length, 3);
  });

  it('the default budget is half of the free disk plus the cache: it follows the disk, and says so when full', async () => {
    let free = 6 * 1024;
    const c = new ModelCache(tmp(), 'auto', () => free);
    assert.equal(c.budgetBytes, 3 * 1024, 'an empty cache on a disk with 6 KiB free: 3 KiB');
    const a = Buffer.alloc(2 * 1024, 1);
    await c.receive(Readable.from([a]), sha(a), 0, a.length);
    free -= a.length; // the file came out of the free space: the budget does not move
    assert.equal(c.budgetBytes, 3 * 1024);
    c.inUse.add(sha(a));
    const b = Buffer.alloc(2 * 1024, 2);
    const err = await c.receive(Readable.from([b]), sha(b), 0, b.length).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(isRelayError(err, 'CACHE_FULL'), String(err));
    assert.match(err.message, /auto: 50% of the free disk and the cache; set --cache-budget-mb/);
    free -= 2 * 1024; // something else filled the disk: the budget shrinks with it
    assert.equal(c.budgetBytes, 2 * 1024);
  });

  it('prune removes every model no replica uses (and its rpc cache) and stale partial pushes; keeps what is in use', async () => {
    const c = new ModelCache(tmp(), 0);
    const [used, idle] = [Buffer.alloc(1024, 1), Buffer.alloc(1024, 2)];
    for (const f of [used, idle]) await c.receive(Readable.from([f]), sha(f), 0, f.length);
    c.inUse.add(sha(used));
    const stale = Buffer.alloc(4096, 3);
    await assert.rejects(c.receive(Readable.from([stale.subarray(0, 1000)]), sha(stale), 0, stale.length), (e: unknown) => isRelayError(e, 'PUSH_INCOMPLETE'));
    const r = c.prune();
    assert.deepEqual(r.removed, [{ sha256: sha(idle), size: 1024 }]);
    assert.deepEqual(r.kept, [{ sha256: sha(used), size: 1024, why: 'in use' }]);
    assert.deepEqual(r.partials, [{ sha256: sha(stale), size: 1000 }]);
    assert.deepEqual(c.inventory(), [{ sha256: sha(used), size: 1024 }]);
    assert.deepEqual(c.partials(), []);
  });

  it('a file two fills read stays protected until both end; a vanished rpc-cache file is not counted', async () => {
    const c = new ModelCache(tmp(), 0);
    const f = Buffer.alloc(1024, 5);
    await c.receive(Readable.from([f]), sha(f), 0, f.length);
    c.filling.add(sha(f)); // stage 1's fill
    c.filling.add(sha(f)); // stage 2's, from the same file
    c.filling.delete(sha(f)); // stage 1 done
    assert.deepEqual(
      c.prune().kept.map((k) => k.why),
      ['a shard stage is being prepared from it'],
    );
    c.filling.delete(sha(f));
    assert.deepEqual(
      c.prune().removed.map((r) => r.sha256),
      [sha(f)],
    );
    // A name listed but gone before it is measured (a fill's temp file renamed meanwhile) counts nothing.
    mkdirSync(c.rpcCacheDir, { recursive: true });
    writeFileSync(join(c.rpcCacheDir, '00000000000000aa'), Buffer.alloc(100));
    symlinkSync(join(c.rpcCacheDir, 'gone'), join(c.rpcCacheDir, '.relay-tmp'));
    assert.equal(c.usedBytes(), 100);
  });

  it('the budget makes room from stale partial pushes too, oldest first with the models; a push being received is kept', async () => {
    const c = new ModelCache(tmp(), 8 * 1024);
    const stale = Buffer.alloc(4096, 8);
    await assert.rejects(c.receive(Readable.from([stale.subarray(0, 3000)]), sha(stale), 0, stale.length), (e: unknown) => isRelayError(e, 'PUSH_INCOMPLETE'));
    const old = new Date(Date.now() - 3600_000);
    utimesSync(c.partialOf(sha(stale)), old, old); // a push that never came back, an hour ago
    const model = Buffer.alloc(3000, 9);
    await c.receive(Readable.from([model]), sha(model), 0, model.length);
    const next = Buffer.alloc(4000, 10);
    await c.receive(Readable.from([next]), sha(next), 0, next.length); // 3000 + 3000 + 4000 > 8 KiB: something goes
    assert.deepEqual(c.partials(), [], 'the stale partial went first');
    assert.deepEqual(
      c
        .inventory()
        .map((f) => f.sha256)
        .sort(),
      [sha(model), sha(next)].sort(),
    );
    // evict (the hub no longer has the model) removes a partial of it as well.
    await assert.rejects(c.receive(Readable.from([stale.subarray(0, 100)]), sha(stale), 0, stale.length));
    assert.equal(c.evict(sha(stale)), true);
    assert.deepEqual(c.partials(), []);
  });

  it('prune leaves the partial file of a push being received', async () => {
    const c = new ModelCache(tmp(), 0);
    const f = Buffer.alloc(4096, 4);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const src = Readable.from(
      (async function* () {
        yield f.subarray(0, 1024);
        await gate;
        yield f.subarray(1024);
      })(),
    );
    const receiving = c.receive(src, sha(f), 0, f.length);
    while (c.partials().length === 0 || c.partials()[0]!.size < 1024) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(c.prune().partials, []);
    release();
    await receiving;
    assert.equal(c.has(sha(f)), true);
  });
});

describe('--cache-budget-mb', () => {
  it('takes MiB (0: no cap) or auto; anything else is a clear error', () => {
    assert.equal(cacheBudgetFlag(undefined), undefined);
    assert.equal(cacheBudgetFlag('auto'), 'auto');
    assert.equal(cacheBudgetFlag('0'), 0);
    assert.equal(cacheBudgetFlag('2048'), 2048);
    for (const bad of ['-1', '1.5', 'lots', '']) assert.throws(() => cacheBudgetFlag(bad), /--cache-budget-mb must be/);
  });
});
