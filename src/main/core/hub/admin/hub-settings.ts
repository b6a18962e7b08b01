import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { parseJson, textField } from '../http/request.js';
import type { Mount } from '../http/context.js';
import { hubView } from '../observe/status.js';
import { keyViews } from '../observe/keys-view.js';
import { keyRulesChange } from '../http/keys.js';

/**
 * /v1 API keys (the key is in the 201 answer only) with their rules — class, tokens per day, requests at once — and
 * what each used (today, this month), and the hub's own availability.
 */
export const mountHubSettings: Mount = (app, { deps: d, raw, auth }) => {
  app.get('/api/keys', auth.requireAdmin(true), (_req, res) => {
    const { keys, noKey } = keyViews(d);
    res.json({ keys, no_key: noKey, required: auth.keyRequired() });
  });

  app.post('/api/keys', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      res.status(201).json(await d.keys.create(textField(body.name), keyRulesChange(body)));
    } catch (err) {
      next(err);
    }
  });

  // A key's rules changed (a field left out stays); a bad value is refused and nothing changes.
  app.patch('/api/keys/:name', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const change = keyRulesChange(parseJson(req));
      res.json({ name: String(req.params.name), ...(await d.keys.update(String(req.params.name), change)) });
    } catch (err) {
      next(err);
    }
  });

  app.delete('/api/keys/:name', auth.requireAdmin(false), async (req, res, next) => {
    try {
      await d.keys.revoke(String(req.params.name));
      res.json({ revoked: String(req.params.name) });
    } catch (err) {
      next(err);
    }
  });

  // The hub's own devices: pause/resume (the dashboard's button, `relay pause --hub`), schedule, auto-pause.
  app.post('/api/hub/availability', auth.requireAdmin(false), raw, async (req, res, next) => {
    try {
      const body = parseJson(req);
      const change: { paused?: boolean; schedule?: string; autoPause?: boolean } = {};
      if (body.paused !== undefined) {
        if (typeof body.paused !== 'boolean') throw new RelayError(ErrorCode.INVALID_REQUEST, '"paused" must be true or false');
        change.paused = body.paused;
      }
      if (body.schedule !== undefined) {
        if (typeof body.schedule !== 'string') throw new RelayError(ErrorCode.INVALID_REQUEST, '"schedule" must be a string such as "mon-fri 09:00-17:30"');
        change.schedule = body.schedule;
      }
      if (body.auto_pause !== undefined) {
        if (typeof body.auto_pause !== 'boolean') throw new RelayError(ErrorCode.INVALID_REQUEST, '"auto_pause" must be true or false');
        change.autoPause = body.auto_pause;
      }
      await d.availability.set(change);
      res.json(hubView(d));
    } catch (err) {
      next(err);
    }
  });
};
