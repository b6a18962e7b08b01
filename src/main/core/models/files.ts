import { createHash } from 'node:crypto';
import type { ModelPart, ModelRecord } from '../store/store.js';

/**
 * The files a registered model is made of. A plain GGUF is one file named by its own sha256. A split GGUF
 * (gguf/split.ts) is its parts in load order, each hashed and pushed as a file of its own; the model's
 * `sha256` is then the split id below, so a change to any part is a new model to the scheduler.
 */
export function modelFiles(m: Pick<ModelRecord, 'path' | 'sha256' | 'size' | 'mtimeMs' | 'parts'>): readonly ModelPart[] {
  return m.parts && m.parts.length > 1 ? m.parts : [{ path: m.path, sha256: m.sha256, size: m.size, mtimeMs: m.mtimeMs }];
}

type Served = Pick<ModelRecord, 'path' | 'sha256' | 'size' | 'mtimeMs' | 'parts' | 'mmproj' | 'draft'>;

/** Every file a placement of `m` reads: the model's, then its vision projector's and its draft model's (pushed, cached, evicted with it). */
export function servedFiles(m: Served): readonly ModelPart[] {
  const draft = m.draft ? [{ path: m.draft.path, sha256: m.draft.sha256, size: m.draft.size, mtimeMs: m.draft.mtimeMs }] : [];
  return [...modelFiles(m), ...(m.mmproj ? [m.mmproj] : []), ...draft];
}

/** A split model's identity: the sha256 of its parts' sha256 hex digests, in order, one per line. */
export function splitId(partShas: readonly string[]): string {
  return createHash('sha256').update(partShas.join('\n')).digest('hex');
}

/** Whether `m` is made of (or includes, its projector too) the file with this sha256. */
export function usesFile(m: Served, sha256: string): boolean {
  return servedFiles(m).some((f) => f.sha256 === sha256);
}

/** Whether a node's cache (its files by sha256) holds every file of `m`, its projector too. */
export function cachedIn(cache: { has(sha256: string): boolean }, m: Served): boolean {
  return servedFiles(m).every((f) => cache.has(f.sha256));
}
