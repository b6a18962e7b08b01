import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { root, sources } from './files.js';

/** The environment is one input, read in config.ts; every variable relay reads is documented for users. */

describe('configuration', () => {
  const files = sources(join(root, 'src'));

  it('process.env is read only in src/main/core/config.ts', () => {
    const readers = files.filter((f) => /\bprocess\.env\b/.test(readFileSync(f, 'utf8'))).map((f) => relative(root, f).replace(/\\/g, '/'));
    assert.deepEqual(readers, ['src/main/core/config.ts']);
  });

  it('every RELAY_* variable in src is in docs/config.md', () => {
    const documented = new Set(readFileSync(join(root, 'docs', 'config.md'), 'utf8').match(/RELAY_[A-Z0-9_]+/g));
    const used = new Set(files.flatMap((f) => readFileSync(f, 'utf8').match(/RELAY_[A-Z0-9_]+/g) ?? []));
    assert.ok(used.size > 20, `found ${used.size} variables`);
    assert.deepEqual(
      [...used].filter((v) => !documented.has(v)),
      [],
    );
  });
});
