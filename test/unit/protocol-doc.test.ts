import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';

/**
 * docs/protocol.md is the tunnel's contract for anyone writing another node: every control message type in
 * src/shared/protocol.ts, and every field of it, must be in the document's row for that type.
 */
const root = new URL('../../../', import.meta.url).pathname;
const source = readFileSync(`${root}src/shared/protocol.ts`, 'utf8');
const doc = readFileSync(`${root}docs/protocol.md`, 'utf8');

/** Each interface with a literal `type`: its type name and its top-level field names. */
function messages(): { type: string; fields: string[] }[] {
  const out: { type: string; fields: string[] }[] = [];
  for (const m of source.matchAll(/export interface \w+ \{([\s\S]*?)\n?\}\n/g)) {
    const body = m[1]!.replace(/\/\*\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
    const type = /type: '([a-z-]+)'/.exec(body)?.[1];
    if (!type) continue;
    const fields = body
      .split(/;|\n/)
      .map((p) => /^\s*(\w+)\??:/.exec(p)?.[1])
      .filter((f): f is string => !!f && f !== 'type' && f !== 'id');
    out.push({ type, fields });
  }
  return out;
}

/** The document's line that defines `type`: a table row starting with it, or its `name {fields}` mention. */
function docLine(type: string): string | undefined {
  return doc.split('\n').find((l) => l.startsWith(`| \`${type}\``)) ?? doc.split('\n').find((l) => l.includes(`\`${type} {`));
}

describe('docs/protocol.md follows src/shared/protocol.ts', () => {
  const all = messages();

  it('finds the messages to check', () => {
    assert.ok(all.length >= 14, `only ${all.length} message interfaces found: the parser no longer fits protocol.ts`);
    assert.ok(all.some((m) => m.type === 'start-replica' && m.fields.includes('parts')));
  });

  it('every message type and each of its fields is documented', () => {
    const missing: string[] = [];
    for (const m of all) {
      const line = docLine(m.type);
      if (!line) {
        missing.push(`${m.type}: no row`);
        continue;
      }
      for (const f of m.fields) if (!new RegExp(`\\b${f}\\b`).test(line)) missing.push(`${m.type}.${f}`);
    }
    assert.deepEqual(missing, []);
  });

  it('every stream kind is documented', () => {
    const kinds = /export type StreamKind = ([^;]+);/
      .exec(source)![1]!
      .match(/'([a-z]+)'/g)!
      .map((k) => k.slice(1, -1));
    for (const k of kinds) assert.match(doc, new RegExp(`"kind":"${k}"`), k);
  });
});
