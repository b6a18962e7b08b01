// Type-checks the script of each page in src/renderer with TypeScript (checkJs): the pages have no build step,
// so their inline <script> is extracted and checked as it is, together with the ui/*.js files the page loads. `import('relay-dto')` in a JSDoc type is the
// hub's /status shapes (src/shared/status.ts), `import('relay-ipc')` the tray's IPC contract: a field the page
// reads that the DTO does not have fails here. Run by `npm run lint`.
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const pages = join(root, 'src', 'renderer');
const out = mkdtempSync(join(tmpdir(), 'relay-renderer-check-'));

const options = {
  allowJs: true,
  checkJs: true,
  noEmit: true,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2023.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  types: [],
  skipLibCheck: true,
  // Null checks on (the DTO says which fields may be null); implicit any allowed: the pages are plain JavaScript.
  strictNullChecks: true,
  paths: { 'relay-dto': [join(root, 'src', 'shared', 'status.ts')], 'relay-ipc': [join(root, 'src', 'shared', 'ipc.ts')] },
};

let failed = 0;
for (const page of readdirSync(pages).filter((f) => f.endsWith('.html'))) {
  const html = readFileSync(join(pages, page), 'utf8');
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);
  if (scripts.length === 0) continue;
  // One file per page (each page is its own global scope); line numbers kept as the page has them.
  const before = html.slice(0, html.indexOf('<script>') + '<script>'.length).split('\n').length - 1;
  const file = join(out, page.replace(/\.html$/, '.js'));
  writeFileSync(file, `${'\n'.repeat(before)}${scripts.join('\n')}`);
  // The page's own script files (<script src="/ui/NAME.js">, served from src/renderer/ui) share its global scope.
  const own = [...html.matchAll(/<script src="\/ui\/([a-z-]+\.js)"><\/script>/g)].map((m) => join(pages, 'ui', m[1]));
  const program = ts.createProgram([...own, file], options);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    failed++;
    const name = d.file && own.includes(d.file.fileName) ? `ui/${d.file.fileName.split('/').pop()}` : page;
    const where = d.file ? `src/renderer/${name}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}` : page;
    console.error(`${where}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
  }
}
rmSync(out, { recursive: true, force: true });
if (failed > 0) {
  console.error(`${failed} type error(s) in the renderer pages`);
  process.exit(1);
}
console.log('renderer pages: types check');
