import { UsageError } from './usage.js';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { api, apiFailure, hubUrl, intFlag } from './api.js';
import { cmdPull } from './pull.js';

/** `relay models add|pull|set|import|ls|rm`: the running hub's registry through its admin API. */

export async function cmdModels(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      hub: { type: 'string' },
      name: { type: 'string' },
      'required-vram-mb': { type: 'string' },
      embedding: { type: 'boolean' },
      reranker: { type: 'boolean' },
      mmproj: { type: 'string' },
      draft: { type: 'string' },
      'draft-max': { type: 'string' },
      'draft-min': { type: 'string' },
      json: { type: 'boolean' },
      ctx: { type: 'string' },
      slots: { type: 'string' },
      kv: { type: 'string' },
      'flash-attn': { type: 'string' },
      'max-tokens': { type: 'string' },
      spec: { type: 'string' },
    },
  });
  // A model's own settings: a value, or "default" to go back to the pool's (null on the wire).
  const setting = (v: string | undefined, name: string, int: boolean): number | string | null | undefined => {
    if (v === undefined) return undefined;
    if (v === 'default') return null;
    return int ? intFlag(v, name) : v;
  };
  const settings = {
    context_size: setting(values.ctx, '--ctx', true),
    parallel_slots: setting(values.slots, '--slots', true),
    kv_cache_type: setting(values.kv, '--kv', false),
    flash_attn: setting(values['flash-attn'], '--flash-attn', false),
    max_tokens: setting(values['max-tokens'], '--max-tokens', true),
    // "auto" is the default: sent as null, like "default".
    spec: values.spec === 'auto' ? null : setting(values.spec, '--spec', false),
  };
  const base = hubUrl(values.hub);
  if (sub === 'pull') return cmdPull(base, positionals[0], values.name);
  if (sub === 'add') {
    const file = positionals[0];
    if (!file) throw new UsageError('add needs the FILE to register');
    const body = JSON.stringify({
      path: resolve(file),
      name: values.name,
      required_vram_mb: intFlag(values['required-vram-mb'], '--required-vram-mb'),
      embedding: values.embedding,
      reranker: values.reranker,
      // "none": take the projector away.
      mmproj: values.mmproj === undefined ? undefined : values.mmproj === 'none' ? null : resolve(values.mmproj),
      ...settings,
    });
    const tty = Boolean(process.stderr.isTTY);
    const res = await api(base, `/api/models${tty ? '?progress=1' : ''}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    let result: {
      model?: { name: string; sha256: string; size: number; need_mb: number; embedding?: boolean; reranker?: boolean; mmproj?: { path: string } };
      created?: boolean;
      error?: { code: string; message: string };
    };
    if (tty && res.status === 200) {
      // NDJSON progress lines, then the result line.
      let buf = '';
      let last: typeof result = {};
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += Buffer.from(chunk).toString('utf8');
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = JSON.parse(buf.slice(0, nl)) as { progress?: { done: number; total: number } } & typeof result;
          buf = buf.slice(nl + 1);
          if (line.progress) {
            const pct = line.progress.total ? Math.floor((100 * line.progress.done) / line.progress.total) : 100;
            const bar = '#'.repeat(Math.floor(pct / 4)).padEnd(25, '.');
            process.stderr.write(`\rhashing [${bar}] ${pct}%`);
          } else last = line;
        }
      }
      process.stderr.write('\n');
      result = last;
    } else {
      result = (await res.json()) as typeof result;
    }
    if (result.error || !result.model) return apiFailure(result);
    const m = result.model;
    const kind = m.reranker ? ' (a reranker: /v1/rerank)' : m.embedding ? ' (an embedding model)' : m.mmproj ? ` (sees images: ${m.mmproj.path})` : '';
    console.log(`${result.created ? 'added' : 'already registered'}: ${m.name}${kind}  sha256 ${m.sha256}  ${(m.size / 1048576).toFixed(1)} MB, needs ${m.need_mb} MB`);
    return 0;
  }
  if (sub === 'ls') {
    const res = await api(base, '/api/models');
    const j = (await res.json()) as {
      models?: {
        name: string;
        size: number;
        need_mb: number;
        fits_now: boolean;
        shortfall: string | null;
        arch: string | null;
        sha256: string;
        settings?: { ctx?: number; slots?: number; kv_cache_type?: string; flash_attn?: string; max_tokens?: number; spec?: string };
        need?: Record<string, number | string | boolean>;
        ctx_note?: string | null;
      }[];
      error?: { code: string; message: string };
    };
    if (!res.ok || !j.models) return apiFailure(j);
    if (values.json) {
      console.log(JSON.stringify(j.models, null, 2));
      return 0;
    }
    if (j.models.length === 0) console.log('no models registered (relay models add FILE.gguf)');
    for (const m of j.models) {
      const own = m.settings
        ? Object.entries({
            ctx: m.settings.ctx,
            slots: m.settings.slots,
            kv: m.settings.kv_cache_type,
            'flash-attn': m.settings.flash_attn,
            'max-tokens': m.settings.max_tokens,
            spec: m.settings.spec,
          })
            .filter(([, v]) => v !== undefined)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')
        : '';
      console.log(
        `${m.name.padEnd(24)} ${String(m.arch).padEnd(10)} ${((m.size / 1048576).toFixed(1) + ' MB').padStart(10)}  needs ${m.need_mb} MB  ${m.fits_now ? 'available' : `unavailable: ${m.shortfall}`}${own ? `  (own settings: ${own})` : ''}`,
      );
      if (m.need) console.log(`  ${needParts(m.need)}`);
      if (m.ctx_note) console.log(`  note: ${m.ctx_note}`);
    }
    return 0;
  }
  if (sub === 'set') {
    const name = positionals[0];
    const mmproj = values.mmproj === undefined ? undefined : values.mmproj === 'none' ? null : resolve(values.mmproj);
    // A draft model for speculative decoding: another registered model's name, or "none".
    const draft = values.draft === undefined ? undefined : values.draft === 'none' ? null : values.draft;
    const draftMax = values['draft-max'] === undefined ? undefined : intFlag(values['draft-max'], '--draft-max');
    const draftMin = values['draft-min'] === undefined ? undefined : intFlag(values['draft-min'], '--draft-min');
    if (!name || [...Object.values(settings), mmproj, draft, draftMax, draftMin].every((v) => v === undefined))
      throw new UsageError(name ? `set ${name} needs a setting to change` : "set needs the model's NAME and a setting");
    const body = { ...settings, mmproj, draft, draft_max: draftMax, draft_min: draftMin };
    const res = await api(base, `/api/models/${encodeURIComponent(name)}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const j = (await res.json()) as {
      model?: {
        name: string;
        need_mb: number;
        need: { ctx: number; slots: number; draft_mb?: number };
        ctx_note?: string | null;
        settings?: Record<string, unknown>;
        draft?: { name: string; max: number; min: number };
      };
      error?: { code: string; message: string };
    };
    if (!res.ok || !j.model) return apiFailure(j);
    const m = j.model;
    const drafted = m.draft ? `; draft model ${m.draft.name} (${m.draft.min}–${m.draft.max} tokens a step, ${m.need.draft_mb} MB of the need)` : '';
    console.log(
      `${m.name}: ctx ${m.need.ctx} × ${m.need.slots} slots, needs ${m.need_mb} MB${drafted}; own settings ${JSON.stringify(m.settings ?? {})} (running placements restart on the next request)`,
    );
    if (m.ctx_note) console.log(`note: ${m.ctx_note}`);
    return 0;
  }
  if (sub === 'import') {
    const from = positionals[0];
    if (!from) throw new UsageError('import needs ollama, lmstudio or a DIR');
    const source = from === 'ollama' || from === 'lmstudio' ? from : resolve(from);
    const res = await api(base, '/api/models/import', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ source, ...settings }) });
    const j = (await res.json()) as {
      root?: string;
      registered?: { name: string; created: boolean; mmproj?: { path: string; why: string } }[];
      skipped?: { path: string; why: string }[];
      error?: { code: string; message: string };
    };
    if (!res.ok || !j.registered) return apiFailure(j);
    if (values.json) {
      console.log(JSON.stringify(j, null, 2));
      return 0;
    }
    console.log(`imported from ${j.root}: ${j.registered.filter((r) => r.created).length} new, ${j.registered.filter((r) => !r.created).length} already registered`);
    for (const r of j.registered) console.log(`  ${r.created ? 'added  ' : 'had    '} ${r.name}${r.mmproj ? `  + projector ${r.mmproj.path} (${r.mmproj.why})` : ''}`);
    for (const s of j.skipped ?? []) console.log(`  skipped ${s.path}: ${s.why}`);
    return 0;
  }
  if (sub === 'rm') {
    const name = positionals[0];
    if (!name) throw new UsageError("rm needs the model's NAME");
    const res = await api(base, `/api/models/${encodeURIComponent(name)}`, { method: 'DELETE' });
    const j = (await res.json()) as { removed?: { name: string }; error?: { code: string; message: string } };
    if (!res.ok || !j.removed) return apiFailure(j);
    console.log(`removed: ${j.removed.name}`);
    return 0;
  }
  throw new UsageError(sub === undefined ? 'say add, pull, set, import, ls or rm' : `no models command "${sub}"`);
}

/** "weights 4000 + KV 1024 (sliding layers 174) + overhead 462 + compute 62 MB; largest: the KV cache …" from /api/models' need. */
function needParts(n: Record<string, number | string | boolean>): string {
  const mb = (k: string): number => (typeof n[k] === 'number' ? n[k] : 0);
  const named: [string, string][] = [
    ['weights', 'weights_mb'],
    ['KV', 'kv_mb'],
    ['recurrent state', 'state_mb'],
    ['block scales', 'blocks_mb'],
    ['overhead', 'overhead_mb'],
    [n.flash_attn === false ? 'compute without flash attention' : 'compute', 'compute_mb'],
    ['projector', 'projector_mb'],
    ['draft', 'draft_mb'],
  ];
  const parts = named
    .filter(([label, k]) => mb(k) > 0 || label === 'weights' || label === 'KV' || label === 'overhead')
    .map(([label, k]) => `${label} ${mb(k)}${k === 'kv_mb' && mb('kv_window_mb') > 0 ? ` (sliding layers ${mb('kv_window_mb')})` : ''}`);
  return `${parts.join(' + ')} MB${typeof n.largest === 'string' ? `; largest: ${n.largest}` : ''}`;
}
