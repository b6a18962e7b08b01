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

/**
 * The layers a chat request walks down and back up: /v1 (hub) → scheduler → pool (the hub's side of a node)
 * → tunnel → yamux, and on the node: node → tunnel → yamux. A layer imports only the layers below it, so each
 * file has one job and the walk has one direction; hub and node meet only in what both stand on (`base`: the
 * GGUF reader, llama.cpp, the GPU inventory, the store and registry, pairing, the sharing rules, config, log).
 */
const LAYERS: Record<string, readonly string[]> = {
  shared: ['shared'],
  yamux: ['shared', 'yamux'],
  tunnel: ['shared', 'yamux', 'tunnel'],
  base: ['shared', 'base'],
  pool: ['shared', 'yamux', 'tunnel', 'base', 'pool'],
  node: ['shared', 'yamux', 'tunnel', 'base', 'node'],
  scheduler: ['shared', 'base', 'pool', 'scheduler'],
  hub: ['shared', 'base', 'pool', 'scheduler', 'hub'],
  app: ['shared', 'yamux', 'tunnel', 'base', 'pool', 'node', 'scheduler', 'hub', 'app'],
};

function layerOf(file: string): string {
  const r = relative(root, file).replace(/\\/g, '/');
  if (r.startsWith('src/shared/')) return 'shared';
  if (r.startsWith('src/main/core/tunnel/yamux/')) return 'yamux';
  const m = /^src\/main\/core\/(tunnel|pool|node|scheduler|hub)\//.exec(r);
  if (m) return m[1]!;
  if (r.startsWith('src/main/core/')) return 'base';
  return 'app'; // src/main/app, src/main/electron, the CLI
}

describe('layers', () => {
  it('every import goes down the layers (hub → scheduler → pool → tunnel → yamux; node → tunnel)', () => {
    const offenders: string[] = [];
    for (const f of sources(join(root, 'src'))) {
      const from = layerOf(f);
      for (const i of imports(f)) {
        if (!i.startsWith('.')) continue;
        const to = layerOf(join(f, '..', i.replace(/\.js$/, '.ts')));
        if (!LAYERS[from]!.includes(to)) offenders.push(`${relative(root, f)} (${from}) -> ${i} (${to})`);
      }
    }
    assert.deepEqual(offenders, []);
  });

  it('the layer map names every folder of src/main/core', () => {
    const folders = readdirSync(join(root, 'src', 'main', 'core'), { withFileTypes: true }).filter((e) => e.isDirectory());
    assert.ok(folders.length > 5);
    for (const d of folders) assert.ok(LAYERS[layerOf(join(root, 'src', 'main', 'core', d.name, 'x.ts'))], d.name);
  });
});

describe('comments', () => {
  it('every file a comment in src names exists in the repository', () => {
    const names = new Set<string>();
    const walk = (dir: string): void => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        if (e.name === 'node_modules' || e.name === 'dist' || e.name.startsWith('.')) continue;
        if (e.isDirectory()) walk(join(dir, e.name));
        else names.add(e.name);
      }
    };
    walk(root);
    const missing: string[] = [];
    for (const f of sources(join(root, 'src'))) {
      for (const m of readFileSync(f, 'utf8').matchAll(/[\w-]+\.(?:ts|cts|mjs|js)\b/g)) {
        const name = m[0];
        if (!names.has(name) && !names.has(name.replace(/\.js$/, '.ts'))) missing.push(`${relative(root, f)}: ${name}`);
      }
    }
    assert.ok(names.size > 100);
    assert.deepEqual(missing, []);
  });
});
