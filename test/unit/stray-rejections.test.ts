import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';

/** A promise that fails with nobody to handle it is logged, and the process serves on (Node alone would exit). */
describe('stray rejections', () => {
  it('are logged with their message, and the process goes on', () => {
    const log = new URL('../../src/main/core/log.js', import.meta.url).href;
    const script = `
      const { createLogger, logStrayRejections } = await import(${JSON.stringify(log)});
      logStrayRejections(createLogger({ pretty: false, name: 't' }));
      void Promise.reject(new Error('EBUSY: a kept file held open'));
      setTimeout(() => console.log('still serving'), 50);`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'still serving');
    assert.match(r.stderr, /"message":"EBUSY: a kept file held open".*"msg":"a failure nobody handled: logged, serving on"/);
  });
});
