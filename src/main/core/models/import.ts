import { existsSync } from 'node:fs';
import { access, readdir, readFile, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, dirname, join, relative, sep } from 'node:path';
import { splitName } from '../gguf/split.js';
import { processEnv } from '../config.js';

/**
 * Finding the GGUFs a household already has on the hub machine: Ollama's store (manifests name a model layer,
 * a blob named by its sha256), LM Studio's models folder, or any folder. Discovery only: the registry
 * registers what is found. Names are readable (`qwen3:8b`, `Qwen3-8B-Q4_K_M`) and fit the registry's rule.
 * The walk is asynchronous: a large models folder never holds up the hub's event loop (and so its streams).
 */

export interface Found {
  readonly name: string;
  readonly path: string;
  /** Known without hashing (Ollama names blobs by their sha256 and verifies them itself). */
  readonly sha256?: string;
  /** Its vision projector, found beside it (an Ollama projector layer, an mmproj*.gguf in its folder). */
  readonly mmproj?: { readonly path: string; readonly sha256?: string; readonly why: string };
}

export interface Skipped {
  readonly path: string;
  readonly why: string;
}

export interface Discovery {
  readonly source: string;
  readonly root: string;
  readonly found: Found[];
  readonly skipped: Skipped[];
}

const OLLAMA_MODEL = 'application/vnd.ollama.image.model';
const OLLAMA_PROJECTOR = 'application/vnd.ollama.image.projector';
const OLLAMA_NOT_MODELS: Record<string, string> = {
  'application/vnd.ollama.image.adapter': 'a LoRA adapter (not a model on its own)',
};

/** The quantization's bit count in a GGUF's file name (`…-Q4_K_M.gguf` 4, `…-f16.gguf` 16), as llama.cpp reads it. */
export function quantBits(file: string): number {
  const stem = file.replace(/\.gguf$/i, '').replace(/-\d{5}-of-\d{5}$/i, '');
  const tag = /[-.]([A-Z0-9_]+)$/i.exec(stem)?.[1] ?? '';
  const digits = /\d+/.exec(tag);
  return digits ? Number(digits[0]) : 0;
}

/**
 * The projector for a model among the mmproj files beside it: the one whose quantization is closest to the
 * model's (llama.cpp's find_best_mmproj), the first by name on a tie. `why` says which was chosen.
 */
export function bestProjector(model: string, projectors: readonly string[]): { path: string; why: string } | null {
  if (projectors.length === 0) return null;
  const bits = quantBits(basename(model));
  const ranked = [...projectors].sort((a, b) => Math.abs(quantBits(basename(a)) - bits) - Math.abs(quantBits(basename(b)) - bits) || a.localeCompare(b));
  const path = ranked[0]!;
  const why = projectors.length === 1 ? `the projector beside it` : `of ${projectors.length} projectors beside it, the one whose quantization is closest to the model's`;
  return { path, why };
}

/** A name the registry accepts: letters, digits and . _ : - ; anything else becomes '-'. */
export function importName(s: string): string {
  const n = s
    .replace(/[^A-Za-z0-9._:-]+/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 128);
  return n.length > 0 ? n : 'model';
}

/** Where Ollama keeps models: OLLAMA_MODELS as Ollama reads it, else the user's, else the Linux service's. */
export function ollamaRoot(env: NodeJS.ProcessEnv = processEnv()): string {
  if (env.OLLAMA_MODELS) return env.OLLAMA_MODELS;
  const user = join(homedir(), '.ollama', 'models');
  const service = '/usr/share/ollama/.ollama/models';
  return !existsSync(user) && existsSync(service) ? service : user;
}

/** LM Studio's models folder: ~/.lmstudio/models (current), else ~/.cache/lm-studio/models (older versions). */
export function lmStudioRoot(): string {
  const current = join(homedir(), '.lmstudio', 'models');
  const older = join(homedir(), '.cache', 'lm-studio', 'models');
  return !existsSync(current) && existsSync(older) ? older : current;
}

/** Files below `dir` (symlinked files too: the Hugging Face cache's snapshots are links), at most 8 levels deep. */
async function walk(dir: string, out: string[] = [], depth = 0): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (depth < 8) await walk(p, out, depth + 1);
    } else if (e.isFile()) out.push(p);
    else if (e.isSymbolicLink()) {
      try {
        if ((await stat(p)).isFile()) out.push(p);
      } catch {
        /* a dangling link */
      }
    }
  }
  return out;
}

const exists = (p: string): Promise<boolean> =>
  access(p).then(
    () => true,
    () => false,
  );

/** Ollama: manifests/<registry>/<namespace>/<model>/<tag> → the model layer's blob. */
export async function discoverOllama(root: string): Promise<Discovery> {
  const found: Found[] = [];
  const skipped: Skipped[] = [];
  const manifests = join(root, 'manifests');
  for (const file of await walk(manifests)) {
    const parts = relative(manifests, file).split(sep);
    if (parts.length < 4) continue;
    const [registry, namespace, ...rest] = parts;
    const tag = rest.pop()!;
    const model = rest.join('-');
    const label = registry === 'registry.ollama.ai' && namespace === 'library' ? `${model}:${tag}` : `${namespace}-${model}:${tag}`;
    let layers: { mediaType?: string; digest?: string }[];
    try {
      layers = (JSON.parse(await readFile(file, 'utf8')) as { layers?: typeof layers }).layers ?? [];
    } catch {
      skipped.push({ path: file, why: 'not a readable Ollama manifest' });
      continue;
    }
    // A vision model's projector is a layer of the same manifest.
    const proj = layers.find((l) => l.mediaType === OLLAMA_PROJECTOR && l.digest && /^sha256:[0-9a-f]{64}$/.test(l.digest));
    const projBlob = proj ? join(root, 'blobs', proj.digest!.replace(':', '-')) : null;
    if (proj && !(await exists(projBlob!))) skipped.push({ path: projBlob!, why: `${label}: its projector blob is missing (pull it again with ollama): imported as text only` });
    const mmproj = projBlob && (await exists(projBlob)) ? { path: projBlob, sha256: proj!.digest!.slice('sha256:'.length), why: 'the projector layer of its manifest' } : undefined;
    for (const l of layers) {
      const blob = l.digest && /^sha256:[0-9a-f]{64}$/.test(l.digest) ? join(root, 'blobs', l.digest.replace(':', '-')) : null;
      if (l.mediaType && OLLAMA_NOT_MODELS[l.mediaType]) skipped.push({ path: blob ?? file, why: `${label}: ${OLLAMA_NOT_MODELS[l.mediaType]}` });
      if (l.mediaType !== OLLAMA_MODEL) continue;
      if (!blob || !(await exists(blob))) {
        skipped.push({ path: blob ?? file, why: `${label}: the model blob is missing (pull it again with ollama)` });
        continue;
      }
      found.push({ name: importName(label), path: blob, sha256: l.digest!.slice('sha256:'.length), ...(mmproj ? { mmproj } : {}) });
    }
  }
  return { source: 'ollama', root, found, skipped };
}

/** Any folder (LM Studio's too): every *.gguf below it, named after its file. */
export async function discoverFolder(root: string, source = 'folder'): Promise<Discovery> {
  const found: Found[] = [];
  const skipped: Skipped[] = [];
  const files = (await walk(root)).filter((p) => /\.gguf$/i.test(p));
  // Projectors go with the models in their folder (LM Studio and Hugging Face keep them side by side).
  const projectors = new Map<string, string[]>();
  for (const p of files) if (/^mmproj/i.test(basename(p))) projectors.set(dirname(p), [...(projectors.get(dirname(p)) ?? []), p]);
  const paired = new Set<string>();
  for (const path of files) {
    const file = basename(path);
    if (/^mmproj/i.test(file)) continue;
    // A split GGUF is one model, registered by its first part (the registry reads and hashes every part).
    const split = splitName(file);
    if (split && split.no > 1) {
      skipped.push({ path, why: `part ${split.no} of ${split.count} of the split model ${split.prefix}: comes with its first part` });
      continue;
    }
    let size: number;
    try {
      size = (await stat(path)).size;
    } catch (err) {
      skipped.push({ path, why: `cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` });
      continue;
    }
    if (size === 0) {
      skipped.push({ path, why: 'an empty file' });
      continue;
    }
    const mmproj = bestProjector(path, projectors.get(dirname(path)) ?? []);
    if (mmproj) paired.add(mmproj.path);
    found.push({ name: importName(split ? split.prefix : file.replace(/\.gguf$/i, '')), path, ...(mmproj ? { mmproj } : {}) });
  }
  for (const list of projectors.values()) {
    for (const p of list) if (!paired.has(p)) skipped.push({ path: p, why: 'a vision projector (mmproj) no model beside it was paired with: a projector loads only beside its model' });
  }
  return { source, root, found, skipped };
}

/** `ollama`, `lmstudio` or an absolute folder. */
export function discover(source: string, env: NodeJS.ProcessEnv = processEnv()): Promise<Discovery> {
  if (source === 'ollama') return discoverOllama(ollamaRoot(env));
  if (source === 'lmstudio') return discoverFolder(lmStudioRoot(), 'lmstudio');
  return discoverFolder(source);
}
