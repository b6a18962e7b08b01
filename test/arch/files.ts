import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

/** The repository's root (the tests run from dist/test/arch). */
export const root = new URL('../../../', import.meta.url).pathname;

/** TypeScript sources below `dir` (.ts, .tsx, .cts, .mts). */
export function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : /\.(tsx?|cts|mts)$/.test(e.name) ? [join(dir, e.name)] : []));
}

/** Every file of the repository, as paths from its root with '/' (no node_modules, dist or dot folders). */
export function repoFiles(dir = root): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.name === 'node_modules' || e.name === 'dist' || e.name.startsWith('.')) return [];
    const p = join(dir, e.name);
    return e.isDirectory() ? repoFiles(p) : [relative(root, p).replace(/\\/g, '/')];
  });
}

/**
 * What a source file imports, as written: value and type imports, side-effect imports, re-exports and dynamic
 * imports with a literal path — read by TypeScript's own pre-processor, so comments and strings cannot hide one.
 */
export function imports(file: string): string[] {
  return ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles.map((f) => f.fileName);
}
