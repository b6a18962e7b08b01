import { existsSync } from 'node:fs';
import type { MemorySummary } from '../../gguf/memory.js';
import { memorySummary } from '../../gguf/memory.js';
import { modelFiles } from '../../models/files.js';
import { largestPart } from '../../scheduler/decide/fit.js';
import { contextCapNote } from '../../scheduler/decide/model-settings.js';
import type { ModelRecord } from '../../store/store.js';
import type { ModelStatus } from '../../../../shared/status.js';
import type { AppDeps } from '../http/context.js';

/** A model on the admin API: the stored record in snake_case (mtime_ms), with its need and whether it runs now. */
export type ModelView = Omit<ModelRecord, 'mtimeMs' | 'parts' | 'memory' | 'draft'> & {
  mtime_ms: number;
  /** The cache layout in counts (gguf/memory.ts memorySummary), not the per-layer record. */
  memory?: MemorySummary | null;
  draft?: Omit<NonNullable<ModelRecord['draft']>, 'memory'>;
  parts?: { path: string; sha256: string; size: number; mtime_ms: number }[];
} & ModelViewExtra;

/** What the admin API adds to a model record: the same fields /status shows for it. */
export type ModelViewExtra = Pick<ModelStatus, 'file' | 'need_mb' | 'need' | 'ctx_note' | 'fits_now' | 'shortfall' | 'why_not'>;

const gone = (m: ModelRecord): string => `the file is gone from ${modelFiles(m).find((f) => !existsSync(f.path))?.path ?? m.path} (register it again, or remove the model)`;

/** A model as the admin API and /status show it: the record, its need and whether it can run now. */
export function modelViewer(d: AppDeps): (m: ModelRecord) => ModelView {
  const { registry, scheduler } = d;
  return (m) => {
    const need = scheduler.need(m);
    const a = scheduler.availability(m);
    // A file that is gone is shown as such (and a request for it gets model_file_missing, never stale bytes).
    const file = registry.fileState(m);
    const { mtimeMs, parts, memory, ...rest } = m;
    const draft = rest.draft ? (({ memory: _m, ...d }) => d)(rest.draft) : undefined;
    return {
      ...rest,
      ...(draft ? { draft } : {}),
      mtime_ms: mtimeMs,
      ...(parts ? { parts: parts.map((p) => ({ path: p.path, sha256: p.sha256, size: p.size, mtime_ms: p.mtimeMs })) } : {}),
      file,
      need_mb: Math.ceil(need.needMb),
      need: {
        weights_mb: Math.ceil(need.weightsMb),
        kv_mb: Math.ceil(need.kvMb),
        kv_window_mb: Math.ceil(need.kvWindowMb),
        state_mb: Math.ceil(need.stateMb),
        blocks_mb: Math.ceil(need.blocksMb),
        overhead_mb: Math.ceil(need.overheadMb),
        compute_mb: Math.ceil(need.computeMb),
        projector_mb: Math.ceil(need.projectorMb),
        draft_mb: Math.ceil(need.draftMb),
        flash_attn: need.flashAttn,
        largest: largestPart(need).part,
        ctx: need.ctx,
        slots: need.slots,
        kv_scale: need.kvScale,
        kv_cache_type: need.kvCacheType,
      },
      ...(memory !== undefined ? { memory: memorySummary(memory) } : {}),
      ctx_note: contextCapNote(d.config, m),
      fits_now: a.available && file !== 'missing',
      shortfall: file === 'missing' ? gone(m) : a.reason,
      why_not: file === 'missing' ? gone(m) : a.whyNot,
    };
  };
}
