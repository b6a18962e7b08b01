import type { Mount } from '../http/context.js';
import type { V1ModelDto } from '../../../../shared/status.js';

/**
 * GET /v1/models: the registered models and whether each can run now. The routes that generate (the dialects of dialects.ts) are
 * answered ahead of express, in v1-door.ts.
 */
export const mountV1Models: Mount = (app, h) => {
  const { registry, scheduler } = h.deps;
  const { auth } = h;
  app.get('/v1/models', auth.requireApiKey, (_req, res) => {
    res.json({
      object: 'list',
      data: registry.list().map((m): V1ModelDto => {
        const a = scheduler.availability(m);
        return {
          id: m.name,
          object: 'model',
          created: Math.floor(Date.parse(m.added_at) / 1000),
          owned_by: 'relay',
          available: a.available,
          unavailable_reason: a.reason,
          input_modalities: m.mmproj ? ['text', 'image'] : ['text'],
        };
      }),
    });
  });
};
