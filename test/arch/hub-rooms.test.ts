import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { imports, root, sources } from './files.js';

/**
 * The hub's rooms, src/main/core/hub/<room>/: each says its job by its name, and imports only the rooms listed
 * for it, so a dialect never reaches into the owner's API and the owner's API never into a dialect. The files
 * directly in hub/ are the composition root (index.ts, app.ts), which wires every room.
 */
const ROOMS: Record<string, readonly string[]> = {
  /** What the hub keeps while it runs: its metrics, the charts' history, the recent requests and moves, its own availability. */
  state: ['state'],
  /** What every room's HTTP stands on: the context, reading a body, answering, errors' shapes, the guard, keys and auth. */
  http: ['state', 'http'],
  /** Carrying a request to llama-server: leasing through the pool, retries, stalls, moving an answer. */
  proxy: ['state', 'http', 'proxy'],
  /** The client dialects (api/<dialect>.ts, api/ollama/), translated to llama-server's own. */
  api: ['state', 'http', 'proxy', 'api'],
  /** What the pool shows: /status, the picture, /events, /metrics, the dashboard. */
  observe: ['state', 'http', 'observe'],
  /** The owner's API: models, nodes, pulls, keys, the hub's pause, dashboard logins. */
  admin: ['state', 'http', 'observe', 'admin'],
};
const HUB = 'src/main/core/hub/';

/** The room of a repository path under hub/ ('root' for hub/*.ts), or undefined outside the hub. */
function roomOf(path: string): string | undefined {
  if (!path.startsWith(HUB)) return undefined;
  const rest = path.slice(HUB.length);
  return rest.includes('/') ? rest.slice(0, rest.indexOf('/')) : 'root';
}

/** Pure: every import from one hub room into a room it may not use, for files given with their imports. */
export function roomOffences(files: readonly { file: string; imports: readonly string[] }[]): string[] {
  const out: string[] = [];
  for (const { file, imports: list } of files) {
    const from = roomOf(file);
    if (from === undefined || from === 'root') continue;
    for (const i of list) {
      if (!i.startsWith('.')) continue;
      const to = roomOf(relative(root, join(root, file, '..', i)).replace(/\\/g, '/'));
      if (to === undefined) continue; // a layer below the hub: the layers test holds those
      if (to === 'root' || !(ROOMS[from] ?? []).includes(to)) out.push(`${file} (${from}) -> ${i} (${to})`);
    }
  }
  return out;
}

/** Pure: the first import circle among `files` (paths), as the files around it, or null. */
export function firstCircle(edges: ReadonlyMap<string, readonly string[]>): string[] | null {
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (f: string): string[] | null => {
    if (state.get(f) === 'done') return null;
    if (state.get(f) === 'open') return [...path.slice(path.indexOf(f)), f];
    state.set(f, 'open');
    path.push(f);
    for (const g of edges.get(f) ?? []) {
      const c = visit(g);
      if (c) return c;
    }
    path.pop();
    state.set(f, 'done');
    return null;
  };
  for (const f of edges.keys()) {
    const c = visit(f);
    if (c) return c;
  }
  return null;
}

/** The source file an import names (`./x.js` is `x.ts`, `x.tsx` or `x.cts`'s `.cjs`), or the path as named. */
function sourceOf(path: string): string {
  const stem = path.replace(/\.[cm]?js$/, '');
  return [`${stem}.ts`, `${stem}.tsx`, `${stem}.cts`, `${stem}.mts`].find((p) => existsSync(p)) ?? path;
}

const rel = (f: string): string => relative(root, f).replace(/\\/g, '/');
const hubFiles = (): { file: string; imports: string[] }[] => sources(join(root, HUB)).map((f) => ({ file: rel(f), imports: imports(f) }));

describe('hub rooms', () => {
  it('every folder of the hub is a room with its rules, and nothing else lies in hub/ but the composition root', () => {
    const entries = readdirSync(join(root, HUB), { withFileTypes: true });
    assert.deepEqual(
      entries
        .filter((e) => e.isDirectory())
        .map((e) => e.name)
        .sort(),
      Object.keys(ROOMS).sort(),
    );
    assert.deepEqual(
      entries
        .filter((e) => e.isFile())
        .map((e) => e.name)
        .sort(),
      ['app.ts', 'index.ts'],
    );
  });

  it('each room imports only the rooms below it (a dialect never the owner’s API, the owner’s API never a dialect)', () => {
    const files = hubFiles();
    assert.ok(files.length > 40 && files.flatMap((f) => f.imports).length > 200);
    assert.deepEqual(roomOffences(files), []);
  });

  it('a dialect that imports the owner’s API is caught (the rule above, on the real tree with one import added)', () => {
    const files = hubFiles().map((f) => (f.file.endsWith('/api/anthropic.ts') ? { ...f, imports: [...f.imports, '../admin/models.js'] } : f));
    assert.deepEqual(roomOffences(files), [`${HUB}api/anthropic.ts (api) -> ../admin/models.js (admin)`]);
    const back = hubFiles().map((f) => (f.file.endsWith('/admin/pulls.ts') ? { ...f, imports: [...f.imports, '../api/dialects.js'] } : f));
    assert.deepEqual(roomOffences(back), [`${HUB}admin/pulls.ts (admin) -> ../api/dialects.js (api)`]);
  });

  it('no import circle anywhere in src (type imports included)', () => {
    const edges = new Map<string, string[]>();
    for (const f of sources(join(root, 'src'))) {
      const targets = imports(f)
        .filter((i) => i.startsWith('.'))
        .map((i) => rel(sourceOf(join(f, '..', i))));
      edges.set(rel(f), targets);
    }
    assert.ok(edges.size > 150, `${edges.size} files`);
    assert.equal(
      firstCircle(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a']],
        ]),
      )?.join(' -> '),
      'a -> b -> c -> a',
    );
    assert.deepEqual(firstCircle(edges), null);
  });
});
