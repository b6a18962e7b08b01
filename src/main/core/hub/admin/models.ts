import { existsSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { ErrorCode, httpError, isRelayError, RelayError } from '../../../../shared/errors.js';
import { discover } from '../../models/import.js';
import { applySettings, sameSettings, setsSettings } from '../../scheduler/decide/model-settings.js';
import { refuseSpec } from '../../scheduler/decide/speculation.js';
import { parseJson, textField } from '../http/request.js';
import type { AppDeps, Mount } from '../http/context.js';
import { modelViewer } from '../observe/model-view.js';

/**
 * A PATCH's draft model: `draft` a registered model's name (null: none), `draft_max` / `draft_min` its tokens per
 * step (alone: the draft it has). Null when the body says nothing of it.
 */
function setDraft(registry: AppDeps['registry'], name: string, body: Record<string, unknown>): Promise<{ changed: boolean }> | null {
  const opts = { max: body.draft_max ?? undefined, min: body.draft_min ?? undefined }; // checked by models/draft.ts
  if (body.draft === undefined && opts.max === undefined && opts.min === undefined) return null;
  if (body.draft === null) return registry.setDraft(name, null);
  const draft = body.draft === undefined ? registry.require(name).draft?.name : textField(body.draft);
  if (draft === undefined) throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" has no draft model: give "draft" (a registered model's name) with draft_max / draft_min`);
  return registry.setDraft(name, draft, opts);
}

/** The registry over HTTP: list, add (with hashing progress), per-model settings, import, remove. */
export const mountModels: Mount = (app, { deps: d, raw, auth }) => {
  const { registry, scheduler, nodes } = d;
  const modelView = modelViewer(d);
  app.get('/api/models', auth.requireAdmin(true), (_req, res) => {
    res.json({ models: registry.list().map((m) => modelView(m)) });
  });

  app.post('/api/models', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const input = {
        path: body.path as string,
        name: body.name === undefined || body.name === null ? undefined : textField(body.name),
        required_vram_mb: body.required_vram_mb as number | null | undefined,
        embedding: body.embedding === undefined ? undefined : Boolean(body.embedding),
        reranker: body.reranker === undefined ? undefined : Boolean(body.reranker),
        mmproj: body.mmproj === undefined || body.mmproj === null ? body.mmproj : textField(body.mmproj),
        settings: setsSettings(body) ? applySettings(undefined, body) : undefined,
      };
      if (req.query.progress === '1') {
        // NDJSON: progress lines while hashing, then the result (the CLI draws a progress bar from them).
        res.status(200).setHeader('content-type', 'application/x-ndjson');
        res.flushHeaders();
        try {
          const r = await registry.add(input, (done, total) => res.write(`${JSON.stringify({ progress: { done, total } })}\n`));
          if (r.settingsChanged) await scheduler.stopModel(r.model.name, 'its settings changed');
          res.end(`${JSON.stringify({ model: modelView(r.model), created: r.created })}\n`);
        } catch (err) {
          const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, String(err));
          res.end(`${JSON.stringify(httpError(e).body)}\n`);
        }
        return;
      }
      const r = await registry.add(input);
      if (r.settingsChanged) await scheduler.stopModel(r.model.name, 'its settings changed');
      res.status(r.created ? 201 : 200).json({ model: modelView(r.model), created: r.created });
    } catch (err) {
      next(err);
    }
  });

  // A model's own settings: context, slots, KV cache type, flash attention (null: back to the pool's default).
  // Its running placements stop, so the next request loads it with the new settings.
  app.patch('/api/models/:name', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const name = String(req.params.name);
      const body = parseJson(req);
      const before = registry.require(name).settings;
      const settings = applySettings(before, body);
      // A speculation the model cannot run (draft without a draft model, mtp without heads): refused before anything changes.
      const current = registry.require(name);
      if (settings.spec) refuseSpec({ ...current, draft: body.draft === null ? undefined : body.draft !== undefined ? body.draft : current.draft }, settings.spec);
      // A projector (a path) or none (null): its placements run with or without --mmproj.
      const projector = body.mmproj === undefined ? null : await registry.setProjector(name, body.mmproj === null ? null : textField(body.mmproj));
      const draft = await setDraft(registry, name, body);
      const m = await registry.setSettings(name, settings);
      if (!sameSettings(before, m.settings) || projector?.changed || draft?.changed) {
        scheduler.specs.forget(name);
        await scheduler.stopModel(name, 'its settings changed');
      }
      res.json({ model: modelView(m) });
    } catch (err) {
      next(err);
    }
  });

  // Import the GGUFs already on this machine: Ollama's store, LM Studio's folder, or any folder.
  app.post('/api/models/import', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const source = body.source;
      if (typeof source !== 'string' || !(source === 'ollama' || source === 'lmstudio' || isAbsolute(source))) {
        throw new RelayError(ErrorCode.INVALID_REQUEST, '"source" must be "ollama", "lmstudio" or an absolute folder on the hub');
      }
      const found = await discover(source);
      if (found.found.length === 0 && found.skipped.length === 0 && !existsSync(found.root)) {
        throw new RelayError(ErrorCode.MODEL_FILE_MISSING, `nothing to import: ${found.root} does not exist`, { path: found.root });
      }
      const settings = setsSettings(body) ? applySettings(undefined, body) : undefined;
      const r = await registry.importAll(found, settings);
      // Models already registered whose settings this import changed: their placements restart with them.
      await Promise.all(r.registered.filter((x) => x.settingsChanged).map((x) => scheduler.stopModel(x.name, 'its settings changed')));
      res.json({ source: found.source, root: found.root, ...r });
    } catch (err) {
      next(err);
    }
  });

  app.delete('/api/models/:name', auth.requireAdmin(false), async (req, res, next) => {
    try {
      const name = String(req.params.name);
      registry.require(name);
      await scheduler.stopModel(name, 'model removed from the registry');
      const m = await registry.remove(name);
      // What was measured of it goes too: the name may next be registered for another GGUF.
      scheduler.specs.forget(name);
      scheduler.placer.speeds.forgetModel(name);
      // Every node's copy goes too (unless another registered name uses the same file).
      await nodes.evictUnregistered();
      res.json({ removed: modelView(m) });
    } catch (err) {
      next(err);
    }
  });
};
