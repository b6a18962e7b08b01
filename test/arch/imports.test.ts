import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';

/** The import direction the architecture promises: the headless core never reaches for Electron. */
const root = new URL('../../../', import.meta.url).pathname;

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sources(p));
    else if (/\.tsx?$/.test(e.name)) out.push(p);
  }
  return out;
}

function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1] ?? m[2]!);
}

describe('architecture', () => {
  it('nothing outside src/main/electron imports electron', () => {
    const offenders = sources(join(root, 'src'))
      .filter((f) => !f.includes(`${join('src', 'main', 'electron')}`))
      .filter((f) => imports(f).some((i) => i === 'electron' || i.startsWith('electron/')));
    assert.deepEqual(
      offenders.map((f) => relative(root, f)),
      [],
    );
  });

  it('src/shared imports nothing from node:, npm packages or src/main (contracts only)', () => {
    const offenders: string[] = [];
    for (const f of sources(join(root, 'src', 'shared'))) {
      for (const i of imports(f)) if (!i.startsWith('./')) offenders.push(`${relative(root, f)} -> ${i}`);
    }
    assert.deepEqual(offenders, []);
  });

  it('core modules do not import the composition roots or the CLI', () => {
    const offenders: string[] = [];
    for (const f of sources(join(root, 'src', 'main', 'core'))) {
      for (const i of imports(f)) if (/\/(hub|node)\/|cli\.js$/.test(i) && !/core\/(hub|node)\//.test(relative(root, f))) offenders.push(`${relative(root, f)} -> ${i}`);
    }
    assert.deepEqual(offenders, []);
  });
});
