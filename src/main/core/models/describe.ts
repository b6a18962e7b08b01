import { createHash, type Hash } from 'node:crypto';
import { createReadStream, statSync, type Stats } from 'node:fs';
import { isAbsolute } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { readModelFilesOffThread, splitName } from '../gguf/index.js';
import type { ModelPart, ModelRecord } from '../store/store.js';
import { servedFiles, splitId } from './files.js';

/**
 * A model's files read into what its record holds: the header's facts, the hashes, and whether the files on
 * disk are still the ones hashed. The registry keeps records; this module only reads files.
 */
export type HashProgress = (done: number, total: number) => void;

/** Feed the file's bytes to `h` (a download carries the hash of its part file on); progress every 64 MiB. */
export async function hashFileInto(path: string, h: Hash, progress?: HashProgress): Promise<void> {
  const total = statSync(path).size;
  let done = 0;
  let last = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) {
    h.update(chunk as Buffer);
    done += (chunk as Buffer).byteLength;
    if (progress && (done - last > 64 * 1024 * 1024 || done === total)) {
      last = done;
      progress(done, total);
    }
  }
}

export async function sha256File(path: string, progress?: HashProgress): Promise<string> {
  const h = createHash('sha256');
  await hashFileInto(path, h, progress);
  return h.digest('hex');
}

export function statFile(path: string): Stats {
  let st: Stats;
  try {
    st = statSync(path);
  } catch (err) {
    throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { path });
  }
  if (!st.isFile()) throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `${path} is not a regular file`, { path });
  return st;
}

/**
 * What a model's file(s) say: read (every part of a split model), checked to be a model, hashed. `known`: hashes
 * computed already (an Ollama blob's name, a download that hashed as it wrote), the file's or by path per part.
 */
export async function describe(
  path: string,
  progress?: HashProgress,
  known?: string | ReadonlyMap<string, string>,
): Promise<Omit<ModelRecord, 'name' | 'required_vram_mb' | 'embedding' | 'added_at'>> {
  const knownFor = (p: string): string | undefined => (typeof known === 'string' ? (p === path ? known : undefined) : known?.get(p));
  const st = statFile(path);
  const { info, paths } = await readModelFilesOffThread(path); // refuses non-GGUF, truncated and incomplete split files before hashing, off the event loop
  if (!info.architecture || info.tensorCount === 0) {
    const missing = !info.architecture ? 'no general.architecture' : 'no tensors';
    throw new RelayError(ErrorCode.GGUF_NOT_A_MODEL, `${path} is a GGUF with ${missing}: not a model llama-server can load (a vocabulary-only file or an adapter?)`, { path });
  }
  if (info.architecture === 'clip') {
    throw new RelayError(ErrorCode.GGUF_IS_PROJECTOR, `${path} is a vision projector (mmproj), not a model: llama-server loads it only beside the model it belongs to`, { path });
  }
  const header = {
    arch: info.architecture,
    block_count: info.blockCount,
    kv_bytes_per_token: info.kvBytesPerToken,
    embedding_length: info.embeddingLength,
    memory: info.memory,
    expert_count: info.expertCount,
    expert_used_count: info.expertUsedCount,
    context_length: info.contextLength,
    pooling_type: info.poolingType,
    tensor_bytes: info.tensorBytes,
    expert_bytes: info.expertBytes,
    ...(info.mtpLayers > 0 ? { mtp_layers: info.mtpLayers } : {}),
  };
  if (paths.length === 1) {
    const sha256 = knownFor(path) ?? (await sha256File(path, progress));
    return { path, sha256, size: st.size, mtimeMs: st.mtimeMs, ...header };
  }
  // A split model: every part hashed (one progress over the parts' total), the model named by its split id.
  const stats = paths.map(statFile);
  const total = stats.reduce((a, x) => a + x.size, 0);
  const parts: ModelPart[] = [];
  let before = 0;
  for (const [i, p] of paths.entries()) {
    const sha256 = knownFor(p) ?? (await sha256File(p, progress && ((done) => progress(before + done, total))));
    parts.push({ path: p, sha256, size: stats[i]!.size, mtimeMs: stats[i]!.mtimeMs });
    before += stats[i]!.size;
  }
  return { path, sha256: splitId(parts.map((x) => x.sha256)), size: total, mtimeMs: st.mtimeMs, parts, ...header };
}

/** A vision projector: read, checked to be one (general.architecture = clip), hashed. */
export async function describeProjector(path: string, knownSha256?: string): Promise<ModelPart> {
  if (!isAbsolute(path)) throw new RelayError(ErrorCode.INVALID_REQUEST, `the projector's path must be absolute, got ${JSON.stringify(path)}`);
  statFile(path); // a missing file: model_file_missing, before the header is read
  const { info } = await readModelFilesOffThread(path);
  if (info.architecture !== 'clip') {
    throw new RelayError(ErrorCode.MMPROJ_NOT_A_PROJECTOR, `${path} is not a vision projector (its general.architecture is ${JSON.stringify(info.architecture ?? null)}, a projector's is "clip")`, {
      path,
    });
  }
  return describePart(path, knownSha256);
}

/** A file as a part of a record: its size, modification time and hash now (`knownSha256`: not hashed again). */
export async function describePart(path: string, knownSha256?: string): Promise<ModelPart> {
  const st = statFile(path);
  return { path, sha256: knownSha256 ?? (await sha256File(path)), size: st.size, mtimeMs: st.mtimeMs };
}

/** Each file of a record as it is now: gone, changed since it was hashed (size or modification time), or ok. */
export type FileState = 'ok' | 'missing' | 'changed';

export function filesState(m: ModelRecord): FileState {
  // Registered as one file before relay read split models: read again (as every part) before it is served.
  let state: FileState = !m.parts && (splitName(m.path)?.count ?? 1) > 1 ? 'changed' : 'ok';
  for (const f of servedFiles(m)) {
    let st: Stats;
    try {
      st = statSync(f.path);
    } catch {
      return 'missing';
    }
    if (!st.isFile()) return 'missing';
    if (st.size !== f.size || st.mtimeMs !== f.mtimeMs) state = 'changed';
  }
  return state;
}
