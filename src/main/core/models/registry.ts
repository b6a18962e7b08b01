import { basename, isAbsolute } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { readModelFilesOffThread, splitName } from '../gguf/index.js';
import type { ModelRecord, ModelSettings, Store } from '../store/store.js';
import { describeDraft, type DraftCounts } from './draft.js';
import { describe, describePart, describeProjector, filesState, statFile, type FileState, type HashProgress } from './describe.js';
import { servedFiles } from './files.js';
import type { Discovery, Skipped } from './import.js';

export { sha256File, type FileState, type HashProgress } from './describe.js';

/**
 * The models the hub owns. A record is bound to the bytes it was hashed from: when the file's size or mtime
 * changes, the model is re-hashed and re-read before it is served again, so it is never served under an old
 * hash.
 */

/** llama.cpp's LLAMA_POOLING_TYPE_RANK: the model scores (query, document) pairs. */
const POOLING_RANK = 4;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** A model name the registry takes, or INVALID_REQUEST saying what one is (checked before a pull fetches a byte, too). */
export function checkModelName(name: string): void {
  if (!NAME_RE.test(name)) {
    throw new RelayError(ErrorCode.INVALID_REQUEST, `model name ${JSON.stringify(name)} must be 1-128 letters, digits, or . _ : - (not starting with a symbol)`);
  }
}

export interface AddModelInput {
  readonly path: string;
  readonly name?: string | undefined;
  readonly required_vram_mb?: number | null | undefined;
  readonly embedding?: boolean | undefined;
  /** Served on /v1/rerank: its replicas run with --reranking. */
  readonly reranker?: boolean | undefined;
  /** The model's own context, slots, KV cache type, flash attention (validated by applySettings). */
  readonly settings?: ModelSettings | undefined;
  /** Its vision projector's path (an mmproj GGUF); null removes it, undefined leaves it as it is. */
  readonly mmproj?: string | null | undefined;
  /** The projector's sha256 when known without hashing (an Ollama blob's name). */
  readonly mmprojSha256?: string | undefined;
}

/** One model an import registered (or found registered already), with the projector paired with it. */
export interface Imported {
  readonly name: string;
  readonly path: string;
  readonly created: boolean;
  readonly settingsChanged: boolean;
  readonly mmproj?: { readonly path: string; readonly why: string };
}

/** An empty settings object is no settings: the record says "pool defaults" by having none. */
function setOrClear(m: ModelRecord, s: ModelSettings): void {
  if (Object.keys(s).length > 0) m.settings = { ...s };
  else delete m.settings;
}

export class ModelRegistry {
  /** Re-hashes under way, by model name: concurrent requests for a changed file share one. */
  private readonly verifying = new Map<string, Promise<{ model: ModelRecord; changed: boolean }>>();

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
  ) {}

  /**
   * Records made before relay read each layer's cache (gguf/memory.ts) get it from their header now, without a
   * re-hash: their fit counted every layer at the whole context. A file that cannot be read is left as it is
   * (its first request re-reads or refuses it). Returns how many were read.
   */
  async readLayouts(): Promise<number> {
    let done = 0;
    for (const m of this.list().filter((x) => x.memory === undefined || (x.draft && x.draft.memory === undefined))) {
      try {
        const { info } = await readModelFilesOffThread(m.path);
        const draft = m.draft ? (await readModelFilesOffThread(m.draft.path)).info : null;
        await this.store.update((data) => {
          const rec = data.models.find((x) => x.name === m.name && x.sha256 === m.sha256);
          if (!rec) return;
          Object.assign(rec, { memory: info.memory, kv_bytes_per_token: info.kvBytesPerToken });
          if (rec.draft && draft && rec.draft.sha256 === m.draft?.sha256) Object.assign(rec.draft, { memory: draft.memory, kv_bytes_per_token: draft.kvBytesPerToken });
        });
        done++;
      } catch (err) {
        this.log.warn({ model: m.name, err: (err as Error).message }, 'could not read the header for its cache layout: the fit counts every layer at the whole context');
      }
    }
    if (done > 0) this.log.info({ models: done }, 'read the cache layout of models registered before relay knew it');
    return done;
  }

  list(): readonly ModelRecord[] {
    return this.store.data.models;
  }

  get(name: string): ModelRecord | undefined {
    return this.store.data.models.find((m) => m.name === name);
  }

  require(name: string): ModelRecord {
    const m = this.get(name);
    if (!m) throw new RelayError(ErrorCode.MODEL_NOT_FOUND, `the model "${name}" does not exist`, { model: name });
    return m;
  }

  /** Register a GGUF. The same file again is idempotent; another file under a taken name is refused. */
  /** `known`: hashes computed already (an Ollama blob's name; a pull's, by path): not computed again. */
  async add(input: AddModelInput, progress?: HashProgress, known?: string | ReadonlyMap<string, string>): Promise<{ model: ModelRecord; created: boolean; settingsChanged: boolean }> {
    if (typeof input.path !== 'string' || !isAbsolute(input.path)) {
      throw new RelayError(ErrorCode.INVALID_REQUEST, `path must be an absolute path to a GGUF file on the hub, got ${JSON.stringify(input.path)}`);
    }
    const name = input.name ?? splitName(input.path)?.prefix ?? basename(input.path).replace(/\.gguf$/i, '');
    checkModelName(name);
    const req = input.required_vram_mb;
    if (req !== undefined && req !== null && !(Number.isFinite(req) && req > 0)) {
      throw new RelayError(ErrorCode.INVALID_REQUEST, `required_vram_mb must be a positive number, got ${JSON.stringify(req)}`);
    }
    // The same file, unchanged since it was registered: no second hash (an import run again is quick).
    const prior = this.get(name);
    let d: Awaited<ReturnType<typeof describe>>;
    if (prior && prior.path === input.path && filesState(prior) === 'ok') {
      const { name: _name, required_vram_mb: _req, embedding: _emb, reranker: _rr, added_at: _at, settings: _settings, mmproj: _mm, draft: _draft, ...described } = prior;
      d = described;
    } else {
      d = await describe(input.path, progress, known);
    }
    const samePrior = prior?.mmproj && prior.mmproj.path === input.mmproj && filesState(prior) === 'ok';
    const mmproj = typeof input.mmproj === 'string' ? await describeProjector(input.mmproj, samePrior ? prior.mmproj!.sha256 : input.mmprojSha256) : input.mmproj;
    return this.store.update((data) => {
      const existing = data.models.find((m) => m.name === name);
      if (existing) {
        if (existing.path === d.path && existing.sha256 === d.sha256) {
          // Same file: idempotent. An explicit required_vram_mb or embedding flag updates the record.
          if (req !== undefined) existing.required_vram_mb = req;
          if (input.embedding !== undefined) existing.embedding = input.embedding;
          if (input.reranker !== undefined) existing.reranker = input.reranker;
          const sawBefore = existing.mmproj?.sha256;
          if (mmproj === null) delete existing.mmproj;
          else if (mmproj !== undefined) existing.mmproj = mmproj;
          const before = JSON.stringify(existing.settings ?? {});
          if (input.settings !== undefined) setOrClear(existing, { ...existing.settings, ...input.settings });
          Object.assign(existing, { size: d.size, mtimeMs: d.mtimeMs, ...(d.parts ? { parts: d.parts } : {}) });
          // A projector added, removed or replaced restarts the placements too (they run with --mmproj or without).
          const changed = JSON.stringify(existing.settings ?? {}) !== before || existing.mmproj?.sha256 !== sawBefore;
          return { model: existing, created: false, settingsChanged: changed };
        }
        throw new RelayError(ErrorCode.MODEL_EXISTS, `a model named "${name}" is already registered for ${existing.path}; remove it first or choose another --name`, { model: name });
      }
      // A header with rank pooling (llama.cpp's converter writes it for rerankers) is a reranker unless told otherwise.
      const reranker = input.reranker ?? (d.pooling_type === POOLING_RANK && !input.embedding);
      const model: ModelRecord = {
        name,
        ...d,
        required_vram_mb: req ?? null,
        embedding: input.embedding ?? false,
        ...(reranker ? { reranker: true } : {}),
        ...(mmproj ? { mmproj } : {}),
        added_at: new Date().toISOString(),
      };
      if (model.embedding && model.reranker) throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" cannot be both an embedding model and a reranker`, { model: name });
      if (input.settings) setOrClear(model, input.settings);
      data.models.push(model);
      this.log.info({ model: name, sha256: d.sha256, size: d.size }, 'model registered');
      return { model, created: true, settingsChanged: false };
    });
  }

  /**
   * Register what an import found (see import.ts), one at a time; a file that cannot be registered (not a
   * model, a name another file holds) is reported with its reason, the rest go on.
   */
  async importAll(d: Discovery, settings?: ModelSettings): Promise<{ registered: Imported[]; skipped: Skipped[] }> {
    const registered: Imported[] = [];
    const skipped: Skipped[] = [...d.skipped];
    for (const f of d.found) {
      try {
        let mmproj = f.mmproj;
        let r: Awaited<ReturnType<ModelRegistry['add']>>;
        try {
          r = await this.add({ path: f.path, name: f.name, settings, mmproj: mmproj?.path, mmprojSha256: mmproj?.sha256 }, undefined, f.sha256);
        } catch (err) {
          if (!mmproj) throw err;
          // A projector that will not do (not one, unreadable) costs the model its images, not its place.
          r = await this.add({ path: f.path, name: f.name, settings }, undefined, f.sha256);
          skipped.push({ path: mmproj.path, why: `${f.name}: its projector cannot be used (${(err as Error).message}): imported as text only` });
          mmproj = undefined;
        }
        registered.push({ name: r.model.name, path: f.path, created: r.created, settingsChanged: r.settingsChanged, ...(mmproj ? { mmproj } : {}) });
      } catch (err) {
        skipped.push({ path: f.path, why: `${f.name}: ${(err as Error).message}` });
      }
    }
    this.log.info({ source: d.source, root: d.root, registered: registered.length, skipped: skipped.length }, 'models imported');
    return { registered, skipped };
  }

  /** Whether a record's file is still what was registered: gone, changed (re-hashed before it is served), or ok. */
  fileState(m: ModelRecord): FileState {
    return filesState(m);
  }

  /** Change a model's own settings (see model-settings.ts); the caller restarts its placements. */
  async setSettings(name: string, settings: ModelSettings): Promise<ModelRecord> {
    return this.store.update((data) => {
      const m = data.models.find((x) => x.name === name);
      if (!m) throw new RelayError(ErrorCode.MODEL_NOT_FOUND, `the model "${name}" does not exist`, { model: name });
      setOrClear(m, settings);
      this.log.info({ model: name, settings: m.settings ?? 'pool defaults' }, 'model settings changed');
      return m;
    });
  }

  /** Give a model a vision projector (a path), or take it away (null); whether it changed (its placements restart). */
  async setProjector(name: string, path: string | null): Promise<{ model: ModelRecord; changed: boolean }> {
    const before = this.require(name).mmproj;
    return this.attach(name, 'mmproj', path === null ? null : await describeProjector(path, before?.path === path ? before.sha256 : undefined));
  }

  /** Give a model a draft model for speculative decoding (another registered model; draft.ts checks it), or none (null). */
  async setDraft(name: string, draft: string | null, opts: DraftCounts = {}): Promise<{ model: ModelRecord; changed: boolean }> {
    const target = this.require(name);
    const counts = { max: opts.max ?? target.draft?.max, min: opts.min ?? target.draft?.min };
    return this.attach(name, 'draft', draft === null ? null : await describeDraft(target, this.require(draft), counts));
  }

  /** Set (or, null, remove) a file that runs beside a model; whether its placements must restart. */
  private attach<K extends 'mmproj' | 'draft'>(name: string, key: K, value: ModelRecord[K] | null): Promise<{ model: ModelRecord; changed: boolean }> {
    return this.store.update((data) => {
      const m = data.models.find((x) => x.name === name);
      if (!m) throw new RelayError(ErrorCode.MODEL_NOT_FOUND, `the model "${name}" does not exist`, { model: name });
      const was = JSON.stringify(m[key] ?? null);
      if (value) m[key] = value;
      else delete m[key];
      this.log.info({ model: name, [key]: m[key]?.path ?? null }, `model ${key} set`);
      return { model: m, changed: was !== JSON.stringify(m[key] ?? null) };
    });
  }

  async remove(name: string): Promise<ModelRecord> {
    return this.store.update((data) => {
      const i = data.models.findIndex((m) => m.name === name);
      if (i < 0) throw new RelayError(ErrorCode.MODEL_NOT_FOUND, `the model "${name}" does not exist`, { model: name });
      const [m] = data.models.splice(i, 1);
      return m!;
    });
  }

  /**
   * The record as it is on disk now: unchanged size and mtime → as stored; otherwise re-read and re-hash, once:
   * concurrent callers share the one hash. `changed` is whether the bytes differ (its placements must stop);
   * the same bytes under a new modification time only update the record.
   */
  async verify(name: string): Promise<{ model: ModelRecord; changed: boolean }> {
    const m = this.require(name);
    const state = filesState(m); // one stat per file, per request
    if (state === 'ok') return { model: m, changed: false };
    if (state === 'missing') for (const f of servedFiles(m)) statFile(f.path); // refused with model_file_missing, naming the file
    let p = this.verifying.get(name);
    if (!p) {
      p = this.rehash(name, m).finally(() => this.verifying.delete(name));
      this.verifying.set(name, p);
    }
    return p;
  }

  private async rehash(name: string, before: ModelRecord): Promise<{ model: ModelRecord; changed: boolean }> {
    this.log.warn({ model: name, path: before.path }, 'model file changed on disk since it was registered: re-hashing');
    const d = await describe(before.path);
    const mmproj = before.mmproj ? await describeProjector(before.mmproj.path) : undefined;
    const draft = before.draft ? { ...before.draft, ...(await describePart(before.draft.path)) } : undefined;
    const changed = d.sha256 !== before.sha256 || mmproj?.sha256 !== before.mmproj?.sha256 || draft?.sha256 !== before.draft?.sha256;
    const model = await this.store.update((data) => {
      const rec = data.models.find((x) => x.name === name);
      if (!rec) throw new RelayError(ErrorCode.MODEL_NOT_FOUND, `the model "${name}" does not exist`, { model: name });
      Object.assign(rec, d, mmproj ? { mmproj } : {}, draft ? { draft } : {});
      if (!d.parts) delete rec.parts; // a split model re-written as one file
      return rec;
    });
    if (changed) this.log.warn({ model: name, sha256: d.sha256, was: before.sha256 }, 'model file has new bytes: its placements stop');
    else this.log.info({ model: name }, 'model file re-hashed: the same bytes (only its modification time changed)');
    return { model, changed };
  }
}
