import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** The repository's root (the tests run from dist/test/arch). */
export const root = new URL('../../../', import.meta.url).pathname;

/** TypeScript sources below `dir` (.ts, .tsx, .cts). */
export function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : /\.(tsx?|cts)$/.test(e.name) ? [join(dir, e.name)] : []));
}

/** Every file of the repository, as paths from its root with '/' (no node_modules, dist or dot folders). */
export function repoFiles(dir = root): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.name === 'node_modules' || e.name === 'dist' || e.name.startsWith('.')) return [];
    const p = join(dir, e.name);
    return e.isDirectory() ? repoFiles(p) : [relative(root, p).replace(/\\/g, '/')];
  });
}

/** What a source file imports (value and type imports, re-exports, dynamic imports), as written. */
export function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1] ?? m[2]!);
}
