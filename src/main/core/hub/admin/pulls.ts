import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { parseJson, textField } from '../http/request.js';
import type { Mount } from '../http/context.js';

/**
 * Pulls from Hugging Face over HTTP (models/hf/pulls.ts): `POST /api/models/pull {model, name?}` resolves the
 * repository and answers 202 with the job (or at once with what is wrong: not found, gated, no such quantization,
 * no room); the download's progress is in `GET /api/pulls[/ID]` and in /status (so /events); `DELETE
 * /api/pulls/ID[?keep=1]` cancels it, deleting its part files unless `keep` (pull again to resume).
 */
export const mountPulls: Mount = (app, { deps: d, raw, auth }) => {
  const { pulls } = d;
  app.post('/api/models/pull', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      if (typeof body.model !== 'string') throw new RelayError(ErrorCode.INVALID_REQUEST, '"model" must be a Hugging Face repository: owner/repo, owner/repo:QUANT or owner/repo/FILE.gguf');
      const name = body.name === undefined || body.name === null ? undefined : textField(body.name);
      res.status(202).json({ pull: await pulls.start(body.model, name) });
    } catch (err) {
      next(err);
    }
  });
  app.get('/api/pulls', auth.requireAdmin(true), (_req, res) => {
    res.json({ pulls: pulls.list() });
  });
  app.get('/api/pulls/:id', auth.requireAdmin(true), (req, res, next) => {
    try {
      res.json({ pull: pulls.get(String(req.params.id)) });
    } catch (err) {
      next(err);
    }
  });
  app.delete('/api/pulls/:id', auth.requireAdmin(false), async (req, res, next) => {
    try {
      res.json({ pull: await pulls.cancel(String(req.params.id), req.query.keep === '1') });
    } catch (err) {
      next(err);
    }
  });
};
