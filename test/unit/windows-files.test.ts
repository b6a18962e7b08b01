import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { defaultHomeFor } from '../../src/main/core/config.js';
import { ModelCache } from '../../src/main/core/node/cache/cache.js';
import { linkPart } from '../../src/main/core/node/cache/split-view.js';
import { isBusy, longestNodePath, pathLengthProblem, removeUnlessBusy, renameIntoPlace, WINDOWS_MAX_PATH } from '../../src/main/core/node/cache/windows-files.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'relay-winfiles-'));
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const fail = (code: string) => () => {
  throw Object.assign(new Error(code), { code });
};

describe('files on Windows: the rules, with the platform as a parameter', () => {
  it('the default home is %APPDATA%\\relay on Windows (as the tray app), XDG on Linux; RELAY_HOME wins', () => {
    assert.equal(defaultHomeFor('win32', { APPDATA: 'C:\\Users\\ann\\AppData\\Roaming', HOME: '/c/Users/ann' }), 'C:\\Users\\ann\\AppData\\Roaming\\relay');
    assert.equal(defaultHomeFor('win32', { USERPROFILE: 'C:\\Users\\ann' }), 'C:\\Users\\ann\\AppData\\Roaming\\relay');
    assert.equal(defaultHomeFor('win32', { RELAY_HOME: 'D:\\relay', APPDATA: 'C:\\x' }), 'D:\\relay');
    assert.equal(defaultHomeFor('linux', { HOME: '/home/ann' }), '/home/ann/.local/share/relay');
    assert.equal(defaultHomeFor('linux', { HOME: '/home/ann', XDG_DATA_HOME: '/data' }), '/data/relay');
    assert.equal(defaultHomeFor('darwin', { HOME: '/Users/ann' }), '/Users/ann/Library/Application Support/relay');
  });

  it('a delete Windows refuses (open elsewhere) leaves the file; other errors still throw', () => {
    for (const code of ['EPERM', 'EBUSY', 'EACCES']) {
      assert.ok(isBusy({ code }, 'win32'));
      assert.equal(removeUnlessBusy('x', fail(code), 'win32'), false, code);
      // Elsewhere these are real permission errors (a root-owned cache): they surface.
      assert.equal(isBusy({ code }, 'linux'), false);
      assert.throws(() => removeUnlessBusy('x', fail(code), 'linux'), new RegExp(code));
    }
    assert.throws(() => removeUnlessBusy('x', fail('EIO'), 'win32'), /EIO/);
    assert.equal(removeUnlessBusy(join(tmp(), 'gone')), true, 'a file already gone is removed');
  });

  it('a rename Windows refuses leaves the verified partial and asks for the push again (PUSH_INCOMPLETE)', () => {
    assert.throws(
      () => renameIntoPlace('a.part', 'a.gguf', 'push of a', fail('EBUSY'), 'win32'),
      (e: unknown) => isRelayError(e, 'PUSH_INCOMPLETE') && /EBUSY/.test((e as Error).message),
    );
    assert.throws(() => renameIntoPlace('a.part', 'a.gguf', 'push of a', fail('ENOSPC'), 'win32'), /ENOSPC/);
    assert.throws(() => renameIntoPlace('a.part', 'a.gguf', 'push of a', fail('EACCES'), 'linux'), /EACCES/);
  });

  it("that next push resumes at the partial's end, verifies it and moves it into place", async () => {
    const c = new ModelCache(tmp(), 0);
    const data = Buffer.alloc(6000, 7);
    const h = sha(data);
    writeFileSync(c.partialOf(h), data); // as a refused rename leaves it
    assert.equal(c.resumeOffset(h, data.length), data.length);
    await c.receive(Readable.from([]), h, data.length, data.length);
    assert.ok(c.has(h));
    assert.ok(!existsSync(c.partialOf(h)));
  });

  it('evicting a file a placement uses is deferred until it stops (every platform); using it again cancels', () => {
    const c = new ModelCache(tmp(), 0);
    const data = Buffer.alloc(1024, 3);
    const h = sha(data);
    writeFileSync(c.pathOf(h), data);
    c.inUse.add(h); // a replica's llama-server has it open
    assert.equal(c.evict(h), 'deferred');
    assert.ok(c.has(h), 'not deleted while llama-server has it open');
    c.retryEvictions();
    assert.ok(c.has(h), 'still in use: still deferred');
    c.inUse.delete(h); // the placement stopped (Workloads.release, then retryEvictions)
    c.retryEvictions();
    assert.ok(!c.has(h));
    assert.deepEqual([...c.toEvict], []);

    writeFileSync(c.pathOf(h), data);
    c.inUse.add(h);
    assert.equal(c.evict(h), 'deferred');
    c.touch(h); // a new placement of it: the hub wants it after all
    c.inUse.delete(h);
    c.retryEvictions();
    assert.ok(c.has(h));
  });

  it('split-model parts: a symbolic link, else a hard link (Windows without developer mode), never a copy', () => {
    const made: string[] = [];
    linkPart('t', 'l', { symlink: () => made.push('symlink'), link: () => made.push('link') });
    linkPart('t', 'l', { symlink: fail('EPERM'), link: () => made.push('link') });
    assert.deepEqual(made, ['symlink', 'link']);
    assert.throws(() => linkPart('t', 'l', { symlink: fail('EEXIST'), link: () => made.push('link') }), /EEXIST/);
    assert.throws(
      () => linkPart('t', 'l', { symlink: fail('EPERM'), link: fail('ENOTSUP') }),
      (e: unknown) => isRelayError(e, 'IO_ERROR') && /NTFS/.test((e as Error).message),
    );
    // The real fallback: a hard link to the same file.
    const dir = tmp();
    const target = join(dir, 'part.gguf');
    writeFileSync(target, 'gguf');
    mkdirSync(join(dir, 'view'));
    linkPart(target, join(dir, 'view', 'model-00001-of-00002.gguf'), { symlink: fail('EPERM'), link: linkSync });
    const l = lstatSync(join(dir, 'view', 'model-00001-of-00002.gguf'));
    assert.ok(!l.isSymbolicLink() && l.ino === statSync(target).ino);
    assert.equal(readFileSync(join(dir, 'view', 'model-00001-of-00002.gguf'), 'utf8'), 'gguf');
  });

  it(`paths: the longest is the split view, 103 characters after the home; a home that pushes it past MAX_PATH (${WINDOWS_MAX_PATH}) is named`, () => {
    const home = 'C:\\Users\\ann\\AppData\\Roaming\\relay\\node';
    const longest = longestNodePath(home, 'win32');
    assert.match(longest, /^C:\\Users\\ann\\AppData\\Roaming\\relay\\node\\cache\\split\\f{64}\\model-00001-of-00002\.gguf$/);
    assert.equal(longest.length - home.length, 103);
    assert.equal(pathLengthProblem(home, 'win32'), null);
    const deepest = `C:\\${'d'.repeat(153)}`; // 156 characters: the longest path is 259, and the NUL makes 260
    assert.equal(pathLengthProblem(deepest, 'win32'), null);
    assert.match(pathLengthProblem(`${deepest}x`, 'win32') ?? '', /MAX_PATH \(260\).*at most 156 characters/);
    assert.equal(pathLengthProblem(`/${'d'.repeat(400)}`, 'linux'), null, 'Linux has no such limit');
  });
});
