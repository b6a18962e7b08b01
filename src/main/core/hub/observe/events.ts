import type { IncomingMessage, ServerResponse } from 'node:http';

export interface EventStreamOptions {
  /** How often the snapshot is taken (a change is sent whole; no change sends a comment line). */
  readonly intervalMs: number;
  /** A reader whose unsent backlog passes this is dropped: it stopped reading, and the hub will not hold more. */
  readonly maxBacklogBytes: number;
}

export const EVENTS_DEFAULTS: EventStreamOptions = { intervalMs: 1000, maxBacklogBytes: 1024 * 1024 };

/**
 * Server-sent events of `snapshot()` (the dashboard's live status): the first at once, then each change.
 * A reader that stops reading (a stalled tab, a hostile client) is dropped once its backlog passes the cap.
 */
export function serveEvents(req: IncomingMessage, res: ServerResponse, snapshot: () => string, opts: EventStreamOptions = EVENTS_DEFAULTS): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  let last = '';
  const tick = (): void => {
    if (res.writableLength > opts.maxBacklogBytes) {
      clearInterval(timer);
      res.destroy();
      return;
    }
    const json = snapshot();
    res.write(json !== last ? `data: ${json}\n\n` : ': keep-alive\n\n');
    last = json;
  };
  const timer = setInterval(tick, opts.intervalMs);
  tick();
  req.on('close', () => clearInterval(timer));
}
