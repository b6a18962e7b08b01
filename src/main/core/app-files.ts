import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { isSea } from 'node:sea';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * Where relay's own files are, in the two ways it is installed:
 * - a **package**: a checkout or an npm install (`relay-llm`), where the compiled code sits in dist/ beside
 *   package.json, src/renderer/ (the dashboard) and node_modules/;
 * - a **release**: the portable download, one executable (Node's single-executable application) whose folder
 *   holds app/ (package.json, src/renderer/, the worker threads bundled one file each), node_modules/ (the
 *   native modules: koffi, bufferutil) and llama/ (scripts/release.mjs lays it out).
 * Every file relay reads from its own install is found here, so both layouts are one table.
 */
export type AppLayout = { readonly kind: 'package' | 'release'; readonly root: string };

/** The worker threads, by name: their compiled file under dist/src/main/core/, and in a release app/workers/<name>.cjs. */
export const WORKERS = {
  gguf: 'gguf/worker',
  'rpc-tensors': 'llama/rpc-tensors-worker',
  'growing-hash': 'node/cache/growing-hash-worker',
} as const;
export type WorkerName = keyof typeof WORKERS;

let layout: AppLayout | undefined;

export function appLayout(): AppLayout {
  if (layout) return layout;
  // A release runs as the executable itself: its files lie beside it. Anything else is the package this file is in.
  layout = isSea() ? { kind: 'release', root: dirname(process.execPath) } : { kind: 'package', root: fileURLToPath(new URL('../../../../', import.meta.url)) };
  return layout;
}

/** A file of the package by its path in the checkout (`package.json`, `src/renderer/index.html`). */
export function appFile(rel: string): string {
  const { kind, root } = appLayout();
  return kind === 'release' ? join(root, 'app', rel) : join(root, rel);
}

export function workerUrl(name: WorkerName): URL {
  const { kind, root } = appLayout();
  return pathToFileURL(kind === 'release' ? join(root, 'app', 'workers', `${name}.cjs`) : join(root, 'dist', 'src', 'main', 'core', `${WORKERS[name]}.js`));
}

/**
 * A native module (koffi) as Node would resolve it from the install's root: its node_modules/ (a release's, a
 * checkout's) or any above it (an npm install that hoisted it). Throws MODULE_NOT_FOUND when it is not there.
 */
export function requireNative<T>(id: string): T {
  return createRequire(join(appLayout().root, 'package.json'))(id) as T;
}

function packageJson(): { name: string; version: string } {
  return JSON.parse(readFileSync(appFile('package.json'), 'utf8')) as { name: string; version: string };
}

export function packageVersion(): string {
  return packageJson().version;
}

/** The npm package's name (`relay-llm`: npm's `relay` is another project); its command is `relay`. */
export function packageName(): string {
  return packageJson().name;
}

/** The npm package that carries llama.cpp for one platform beside the `relay-llm` package (esbuild's way). */
export function binaryPackageName(platform: NodeJS.Platform = process.platform, arch: string = process.arch): string {
  return `${packageJson().name}-${platform}-${arch}`;
}

/**
 * The llama.cpp this install ships, built elsewhere (nothing is compiled on this machine): a release's llama/
 * beside the executable, or the llama/ of the binary package npm installed beside the package. Null when
 * neither is there (a checkout, a platform with no binary package): then relay builds from source.
 */
export function shippedLlamaDir(): string | null {
  const { kind, root } = appLayout();
  if (kind === 'release') return existsSync(join(root, 'llama')) ? join(root, 'llama') : null;
  try {
    const pkg = createRequire(join(root, 'package.json')).resolve(`${binaryPackageName()}/package.json`);
    // Only the one of this version: an older copy found up the tree (hoisted, global) is another llama.cpp build.
    const { version } = JSON.parse(readFileSync(pkg, 'utf8')) as { version: string };
    return version === packageVersion() && existsSync(join(dirname(pkg), 'llama')) ? join(dirname(pkg), 'llama') : null;
  } catch {
    return null;
  }
}
