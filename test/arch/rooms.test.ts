import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { imports, root, sources } from './files.js';

/**
 * The rooms of the hub, the scheduler and the node (src/main/core/<part>/<room>/): each says its job by its name,
 * and imports only the rooms listed for it. The files directly in <part>/ are its composition root, which wires
 * every room.
 *
 * The hub: a dialect never reaches into the owner's API and the owner's API never into a dialect.
 */
const HUB_ROOMS: Record<string, readonly string[]> = {
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

/**
 * The scheduler: pure decisions apart from the launchers and the slot carriers. `decide` is the pure part (what fits,
 * the plans, the shard split, routing by prefix, backoff, why a model cannot run) and imports no I/O; `placements`
 * the table of what runs and its leases, the queue and the router; `slots` the kept conversations and their carry;
 * `launch` the launchers (processes, node commands); `run` what acts on the table (the placer, the keep-alive, the
 * watch on nodes, /status's view). scheduler.ts wires them.
 */
const SCHEDULER_ROOMS: Record<string, readonly string[]> = {
  decide: ['decide'],
  slots: ['slots'],
  placements: ['decide', 'slots', 'placements'],
  launch: ['decide', 'slots', 'placements', 'launch'],
  run: ['decide', 'slots', 'placements', 'launch', 'run'],
};

/**
 * The node: `cache` the files the hub pushed and the rpc cache filled from them; `work` the processes it runs for the
 * hub (replicas, rpc servers) and their kept slots; `link` its way to the hub (join, credential, settings, the tray's
 * local API). agent.ts, commands.ts, streams.ts and reports.ts are its composition root.
 */
const NODE_ROOMS: Record<string, readonly string[]> = {
  cache: ['cache'],
  work: ['cache', 'work'],
  link: ['link'],
};

interface Part {
  readonly base: string;
  readonly rooms: Record<string, readonly string[]>;
  readonly root: readonly string[];
}
const HUB: Part = { base: 'src/main/core/hub/', rooms: HUB_ROOMS, root: ['app.ts', 'index.ts'] };
const SCHEDULER: Part = { base: 'src/main/core/scheduler/', rooms: SCHEDULER_ROOMS, root: ['scheduler.ts'] };
const NODE: Part = { base: 'src/main/core/node/', rooms: NODE_ROOMS, root: ['agent.ts', 'commands.ts', 'reports.ts', 'streams.ts'] };

/** The room of a repository path under the part ('root' for its own files), or undefined outside it. */
function roomOf(part: Part, path: string): string | undefined {
  if (!path.startsWith(part.base)) return undefined;
  const rest = path.slice(part.base.length);
  return rest.includes('/') ? rest.slice(0, rest.indexOf('/')) : 'root';
}

/** Pure: every import from one room of `part` into a room it may not use, for files given with their imports. */
export function roomOffences(part: Part, files: readonly { file: string; imports: readonly string[] }[]): string[] {
  const out: string[] = [];
  for (const { file, imports: list } of files) {
    const from = roomOf(part, file);
    if (from === undefined || from === 'root') continue;
    for (const i of list) {
      if (!i.startsWith('.')) continue;
      const to = roomOf(part, relative(root, join(root, file, '..', i)).replace(/\\/g, '/'));
      if (to === undefined) continue; // a layer below: the layers test holds those
      if (to === 'root' || !(part.rooms[from] ?? []).includes(to)) out.push(`${file} (${from}) -> ${i} (${to})`);
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
const partFiles = (part: Part): { file: string; imports: string[] }[] => sources(join(root, part.base)).map((f) => ({ file: rel(f), imports: imports(f) }));

/** Every folder of `part` is a room with its rules, and nothing else lies in it but its composition root. */
function checkLayout(part: Part): void {
  const entries = readdirSync(join(root, part.base), { withFileTypes: true });
  assert.deepEqual(
    entries
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort(),
    Object.keys(part.rooms).sort(),
  );
  assert.deepEqual(
    entries
      .filter((e) => e.isFile())
      .map((e) => e.name)
      .sort(),
    [...part.root].sort(),
  );
}

describe('rooms', () => {
  for (const [name, part] of [
    ['hub', HUB],
    ['scheduler', SCHEDULER],
    ['node', NODE],
  ] as const) {
    it(`every folder of the ${name} is a room with its rules, and nothing else lies in it but the composition root`, () => checkLayout(part));
    it(`each room of the ${name} imports only the rooms it may`, () => {
      const files = partFiles(part);
      assert.ok(files.length > 15 && files.flatMap((f) => f.imports).length > 60, `${files.length} files`);
      assert.deepEqual(roomOffences(part, files), []);
    });
  }

  it('a dialect that imports the owner’s API is caught (the rule above, on the real tree with one import added)', () => {
    const files = partFiles(HUB).map((f) => (f.file.endsWith('/api/anthropic.ts') ? { ...f, imports: [...f.imports, '../admin/models.js'] } : f));
    assert.deepEqual(roomOffences(HUB, files), [`${HUB.base}api/anthropic.ts (api) -> ../admin/models.js (admin)`]);
    const back = partFiles(HUB).map((f) => (f.file.endsWith('/admin/pulls.ts') ? { ...f, imports: [...f.imports, '../api/dialects.js'] } : f));
    assert.deepEqual(roomOffences(HUB, back), [`${HUB.base}admin/pulls.ts (admin) -> ../api/dialects.js (api)`]);
  });

  it('a pure decision that reaches for a launcher is caught', () => {
    const files = partFiles(SCHEDULER).map((f) => (f.file.endsWith('/decide/plan.ts') ? { ...f, imports: [...f.imports, '../launch/launcher.js'] } : f));
    assert.deepEqual(roomOffences(SCHEDULER, files), [`${SCHEDULER.base}decide/plan.ts (decide) -> ../launch/launcher.js (launch)`]);
  });

  it('the scheduler’s decisions are pure: no node: module, no npm package, nothing below them that does I/O', () => {
    const io = /^(node:|pino$|ws$|express$|koffi$)|\/(llama\/(processes|supervisor|install|build)|pool\/|tunnel\/|store\/store-file|durable)/;
    const offenders = partFiles(SCHEDULER)
      .filter((f) => f.file.includes('/decide/'))
      .flatMap((f) => f.imports.filter((i) => io.test(i)).map((i) => `${f.file} -> ${i}`));
    assert.deepEqual(offenders, []);
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
