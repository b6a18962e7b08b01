import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { imports, repoFiles, root, sources } from './files.js';

/** The import direction the architecture promises: the headless core never reaches for Electron. */

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

/** The folders of src/main/core that are `base`; a new folder must be given a layer here (the test below says so). */
const BASE_FOLDERS = ['gguf', 'llama', 'gpu', 'store', 'models', 'pairing'];

function layerOf(file: string): string | undefined {
  const r = relative(root, file).replace(/\\/g, '/');
  if (r.startsWith('src/shared/')) return 'shared';
  if (r.startsWith('src/main/core/tunnel/yamux/')) return 'yamux';
  const m = /^src\/main\/core\/(tunnel|pool|node|scheduler|hub)\//.exec(r);
  if (m) return m[1]!;
  const folder = /^src\/main\/core\/([^/]+)\//.exec(r);
  if (folder) return BASE_FOLDERS.includes(folder[1]!) ? 'base' : undefined;
  if (r.startsWith('src/main/core/')) return 'base'; // config, log, availability, durable, timeouts, worker
  return 'app'; // src/main/app, src/main/electron, the CLI
}

describe('layers', () => {
  it('every import goes down the layers (hub → scheduler → pool → tunnel → yamux; node → tunnel)', () => {
    const offenders: string[] = [];
    let checked = 0;
    for (const f of sources(join(root, 'src'))) {
      const from = layerOf(f);
      for (const i of imports(f)) {
        if (!i.startsWith('.')) continue;
        checked++;
        const to = layerOf(join(f, '..', i.replace(/\.js$/, '.ts')));
        if (from === undefined || to === undefined || !LAYERS[from]!.includes(to)) offenders.push(`${relative(root, f)} (${from}) -> ${i} (${to})`);
      }
    }
    assert.ok(checked > 300, `only ${checked} imports found`);
    assert.deepEqual(offenders, []);
  });

  it('the layer map names every folder of src/main/core', () => {
    const folders = readdirSync(join(root, 'src', 'main', 'core'), { withFileTypes: true }).filter((e) => e.isDirectory());
    assert.ok(folders.length > 5);
    const unmapped = folders.map((d) => d.name).filter((d) => layerOf(join(root, 'src', 'main', 'core', d, 'x.ts')) === undefined);
    assert.deepEqual(unmapped, [], 'give each folder of src/main/core a layer (BASE_FOLDERS or its own)');
  });
});

describe('comments', () => {
  it('every file a comment in src names exists in the repository (at the path it gives)', () => {
    const paths = repoFiles();
    // `a/b.ts` names the file by the end of its path; an import's `.js` is its `.ts` source.
    const exists = (named: string): boolean => [named, named.replace(/\.js$/, '.ts')].some((n) => paths.some((p) => p === n || p.endsWith(`/${n}`)));
    const missing: string[] = [];
    let named = 0;
    for (const f of sources(join(root, 'src'))) {
      for (const m of readFileSync(f, 'utf8').matchAll(/(?<![\w./-])(?:\.\.?\/)*((?:[\w-]+\/)*[\w-]+\.(?:ts|cts|mjs|js))\b/g)) {
        named++;
        if (!exists(m[1]!)) missing.push(`${relative(root, f)}: ${m[0]}`);
      }
    }
    assert.ok(paths.length > 100 && named > 100, `${paths.length} files, ${named} names`);
    assert.deepEqual(missing, []);
  });
});

describe('file size', () => {
  it('no source file in src reaches 350 lines (one job per file; split by concern when one grows)', () => {
    const files = sources(join(root, 'src'));
    const long = files.map((f) => ({ f: relative(root, f), lines: readFileSync(f, 'utf8').split('\n').length - 1 })).filter((x) => x.lines >= 350);
    assert.ok(files.length > 100);
    assert.deepEqual(long, []);
  });

  it('no child is spawned detached: on Windows that would take it out of the job that ends it with relay', () => {
    const detached = sources(join(root, 'src'))
      .filter((f) => /\bdetached\s*:\s*true/.test(readFileSync(f, 'utf8')))
      .map((f) => relative(root, f));
    assert.deepEqual(detached, []);
  });

  it('every child relay starts is given windowsHide: a console program started by the tray app opens no window on Windows', () => {
    const missing: string[] = [];
    for (const f of sources(join(root, 'src'))) {
      const text = readFileSync(f, 'utf8');
      for (const m of text.matchAll(/\b(spawn|spawnSync|execFile|execFileSync)\(/g)) {
        // The call's own arguments: up to its closing parenthesis.
        let depth = 0;
        let end = m.index + m[0].length - 1;
        for (; end < text.length; end++) {
          if (text[end] === '(') depth++;
          else if (text[end] === ')' && --depth === 0) break;
        }
        if (!/windowsHide:\s*true/.test(text.slice(m.index, end))) missing.push(`${relative(root, f)}:${text.slice(0, m.index).split('\n').length}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  it("the fast tests need no llama.cpp: unit, arch and fuzz tests use the suite's own GGUF writer, never the build or a process", () => {
    // `npm run test:unit` runs with RELAY_LLAMA_BIN_DIR pointing nowhere: test/helpers/llama.js would reach for the
    // build (its vocabularies, its binaries); fixtures/synthetic-vocab.js gives the same models without it.
    const offenders: string[] = [];
    for (const dir of ['unit', 'arch', 'fuzz']) {
      for (const f of sources(join(root, 'test', dir))) {
        for (const i of imports(f)) if (/helpers\/(llama|hub|node|release|wine)\.js$/.test(i)) offenders.push(`${relative(root, f)} -> ${i}`);
      }
    }
    assert.deepEqual(offenders, []);
  });
});
