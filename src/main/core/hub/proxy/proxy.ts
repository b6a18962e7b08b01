import type { Duplex } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { OPENAI_ERRORS, type ErrorShape } from '../http/errors.js';
import { FailedHalt, type Lease } from '../../scheduler/placement.js';
import type { SpareSockets } from '../../llama/spare-sockets.js';
import { ChunkedBody, openUpstream, postUpstream } from './upstream-http.js';
import { sendJson } from '../http/answer.js';
import { llamaRefusal, usageFromTail, type Usage } from './llama-answer.js';
import { endingError } from './sse-error.js';
import type { Stitcher } from './stitch.js';

/**
 * proxyToPlacement: forward one /v1 request to a placement's llama-server and stream the answer back byte for byte.
 * Nothing reaches the client before the upstream's first body byte: until then a failure of the placement
 * (connect refused or reset, the node's stream gone, a 5xx that is not llama-server's own refusal) is answered
 * with `retry`, and the caller may try another placement. llama-server's own answer to the request — a 4xx, or a
 * 5xx carrying its JSON error — is the request's fault, not the placement's: it goes to the client with
 * llama-server's message under a stable code (llamaRefusal), and nothing is retried.
 * After it, the bytes flow: backpressure pauses upstream while the client's socket is full, a client that
 * goes away aborts the upstream request (llama-server stops generating and frees the slot), and an upstream
 * that dies mid-response ends an SSE stream with an OpenAI-shaped error event, any other response with a reset;
 * one whose placement is stopped gives a continuable request back to move (`moved`, continuation.ts).
 */

const TAIL_BYTES = 8192;

/** How much of a response's start is kept for its token counts (a Messages stream gives its input tokens first). */
const HEAD_BYTES = 4096;

/** The most of an error body kept (llama-server's are a line of JSON). */
const MAX_ERROR_BODY = 64 * 1024;

/**
 * An answer rewritten on its way to the client, for a dialect llama-server does not speak (Ollama's NDJSON): it
 * is given llama-server's bytes as they come and returns what the client gets for them ('' for nothing yet).
 */
export interface Translator {
  readonly contentType: string;
  /** Whether the client's answer is a stream of lines (cut by `broken`'s last line) or one body. */
  readonly streams: boolean;
  chunk(b: Buffer): string;
  /** llama-server's answer is complete: the rest (a RelayError thrown here is the client's answer if nothing went yet). */
  end(): string;
  /** The last line of a stream cut by `err`. */
  broken(err: RelayError): string;
}

/**
 * `retry`: nothing was sent, another placement may take it; `halted`: because its placement was stopped, not failed.
 * `moved`: its placement was stopped mid-answer and the request said it can continue elsewhere (`continuable`): the
 * client's response is still open, `sent` is every byte of llama-server's stream it was given (whole events).
 */
export type ProxyOutcome =
  | { readonly kind: 'done' }
  | { readonly kind: 'retry'; readonly error: RelayError; readonly halted?: boolean }
  | { readonly kind: 'moved'; readonly error: RelayError; readonly sent: Buffer; readonly head: Buffer };

export function proxyToPlacement(opts: {
  lease: Lease;
  path: string;
  body: Buffer;
  req: IncomingMessage;
  res: ServerResponse;
  log: Logger;
  /** Ready sockets to this machine's llama-servers; without, a fresh connection per request. */
  spares?: SpareSockets;
  /** The route's dialect: the shape of the errors it answers (OpenAI's unless said). */
  errors?: ErrorShape;
  /** The answer rewritten for a dialect llama-server does not speak (see Translator). */
  translate?: Translator;
  /** A stop mid-answer gives the request back (`moved`) instead of ending the client's stream with an error. */
  continuable?: boolean;
  /**
   * A continuation: the response is already under way (`sent`: what it was given, `head`: its start); llama-server's
   * bytes pass through the stitcher on their way (continuation.ts).
   */
  continuing?: { readonly stitch: Stitcher; readonly sent: Buffer; readonly head: Buffer };
  onDone: (status: number, usage: Usage | null) => void;
  /** llama-server's first byte of the answer arrived. */
  onStart?: () => void;
}): Promise<ProxyOutcome> {
  const { lease, res, log, spares, translate, continuing } = opts;
  const shape = opts.errors ?? OPENAI_ERRORS;
  const url = new URL(opts.path, lease.baseUrl);
  // The last chunks, kept by reference and decoded once at the end: nothing per token but a push.
  const tailChunks: Buffer[] = [];
  let tailBytes = 0;
  const headChunks: Buffer[] = continuing ? [continuing.head] : [];
  let headBytes = continuing?.head.byteLength ?? 0;
  /** What the client was given, for a move (continuable requests only). */
  const sentChunks: Buffer[] = continuing ? [continuing.sent] : [];
  let settled = false;
  let resolveOutcome!: (o: ProxyOutcome) => void;
  const outcome = new Promise<ProxyOutcome>((r) => (resolveOutcome = r));
  // The stall watch: a request that hears nothing for lease.stallMs() (model-aware, a few seconds at most) has its
  // placement looked at — its nodes pinged, its processes checked — and again after each quiet spell. A dead node
  // or a hung process fails the placement, which breaks this upstream: the client gets its error event, or the
  // request goes to another placement if nothing reached it yet. Per chunk it costs one clock read.
  let lastHeard = Date.now();
  let watchTimer: NodeJS.Timeout | null = null;
  const watch = (): void => {
    if (settled) return;
    const quiet = Date.now() - lastHeard;
    const limit = lease.stallMs();
    if (quiet < limit) {
      watchTimer = setTimeout(watch, limit - quiet);
      return;
    }
    void lease.probe().finally(() => {
      lastHeard = Date.now(); // all was well: the next look after another quiet spell
      if (!settled) watchTimer = setTimeout(watch, lease.stallMs());
    });
  };
  const unwatch = (): void => {
    if (watchTimer) clearTimeout(watchTimer);
    watchTimer = null;
  };

  const finish = (status: number): void => {
    if (settled) return;
    settled = true;
    unwatch();
    const usage = usageFromTail(Buffer.concat(tailChunks).toString('utf8'), Buffer.concat(headChunks).toString('utf8'));
    lease.release(usage);
    opts.onDone(status, usage);
    resolveOutcome({ kind: 'done' });
  };
  /** Nothing was sent to the client yet: give the request back for another placement. */
  const retry = (why: string): void => {
    if (settled) return;
    settled = true;
    unwatch();
    up.destroy();
    lease.release();
    if (!lease.connect) spares?.refill(url.hostname, Number(url.port));
    const halted = lease.halted.aborted;
    log[halted ? 'info' : 'warn']({ model: lease.model.name, placement: lease.placementId, why }, `placement ${halted ? 'stopped' : 'failed'} before the first byte: trying another`);
    const error = new RelayError(ErrorCode.UPSTREAM_ERROR, `the placement of "${lease.model.name}" failed before answering (${why})`, { model: lease.model.name });
    resolveOutcome({ kind: 'retry', error, halted });
  };

  const host = url.hostname;
  const port = Number(url.port);
  // A node replica: the request rides a fresh http stream through that node's tunnel.
  const up: Duplex = openUpstream(lease, spares, host, port);

  let isSse = false;
  let started = false;
  let status = 502;
  let contentType: string | undefined;
  /** An error status: its body, read whole before anything is answered (see answerError). */
  let errorStatus = 0;
  const errorParts: Buffer[] = [];
  let errorBytes = 0;
  /** llama-server's chunked bytes go to the client's socket as they came (upstream-http.ts says why). */
  let passRaw = false;
  let raw: Duplex | null = null;
  /** The socket a backpressure wait listens on for 'drain' (null: not waiting). Left once when the upstream ends. */
  let draining: Duplex | ServerResponse | null = null;
  const resume = (): void => {
    draining = null;
    up.resume();
  };
  up.once('close', () => draining?.off('drain', resume)); // a client connection kept alive must not collect it
  const brokenUpstream = (why: string): void => {
    if (settled) return;
    if (!started) return retry(why);
    if (res.writableEnded || res.destroyed) return;
    const err = new RelayError(ErrorCode.REPLICA_FAILED, `the ${lease.kind === 'shard' ? 'shard' : 'replica'} of "${lease.model.name}" stopped mid-response (${why})`, { model: lease.model.name });
    log.warn({ model: lease.model.name, placement: lease.placementId, why }, 'upstream broke mid-response');
    if (!res.headersSent) {
      // A translated answer that is one body had sent nothing yet: the client gets a whole error.
      const { status, body } = shape.answer(err);
      sendJson(res, status, body);
    } else if (translate?.streams) res.end(translate.broken(err));
    else if (isSse) res.end(shape.event(err));
    else res.destroy(err);
    finish(502);
  };

  // The scheduler stopped the placement (a pause, an eviction): end the request now — before its first byte it goes
  // to another placement, after it the stream ends with its error — and close the upstream connection, so the
  // llama-server (which stops generating at SIGTERM but keeps an open connection until it is killed) exits at once.
  const halted = (): void => {
    const why = `stopped: ${String(lease.halted.reason)}`;
    if (started && opts.continuable && !settled && !res.writableEnded && !errorStatus && !(lease.halted.reason instanceof FailedHalt)) {
      // The answer goes on elsewhere (pooled.ts): the client's response stays open.
      settled = true;
      unwatch();
      up.destroy();
      lease.release();
      log.info({ model: lease.model.name, placement: lease.placementId, why }, 'placement stopped mid-response: moving the answer');
      const error = new RelayError(ErrorCode.REPLICA_FAILED, `the ${lease.kind === 'shard' ? 'shard' : 'replica'} of "${lease.model.name}" stopped mid-response (${why})`, { model: lease.model.name });
      const sent = raw ? Buffer.concat(new ChunkedBody().read(Buffer.concat(sentChunks)).payload) : Buffer.concat(sentChunks);
      return resolveOutcome({ kind: 'moved', error, sent, head: Buffer.concat(headChunks) });
    }
    brokenUpstream(why);
    up.destroy();
  };
  if (lease.halted.aborted) queueMicrotask(halted);
  else lease.halted.addEventListener('abort', halted, { once: true });
  up.once('close', () => lease.halted.removeEventListener('abort', halted));
  res.on('close', () => {
    if (!res.writableFinished && !settled) {
      // The client went away: stop the generation upstream so the slot frees now, not at max_tokens.
      up.destroy();
      finish(499);
    }
  });

  /** An error status, its body whole: llama-server's own refusal goes to the client; anything else is the placement's failure. */
  const answerError = (): void => {
    const text = Buffer.concat(errorParts).toString('utf8');
    const refusal = llamaRefusal(errorStatus, text);
    started = true;
    if (refusal) {
      log.info({ model: lease.model.name, placement: lease.placementId, status: errorStatus, code: refusal.code, message: refusal.message.slice(0, 200) }, 'llama-server refused the request');
      const { status: st, body } = shape.answer(refusal);
      if (continuing) endStream(refusal);
      else sendJson(res, st, body);
      return finish(st);
    }
    if (errorStatus >= 500) {
      started = false;
      return retry(`llama-server answered ${errorStatus}`);
    }
    // A 4xx without llama-server's JSON (not one it sends): passed on as it is.
    if (continuing) {
      endStream(new RelayError(ErrorCode.UPSTREAM_ERROR, `the continuation was answered ${errorStatus}`));
      return finish(errorStatus);
    }
    res.statusCode = errorStatus;
    if (contentType) res.setHeader('content-type', contentType);
    res.end(text);
    finish(errorStatus);
  };

  /** A continuation's stream ends with the dialect's error event (its response began on another placement). */
  const endStream = (err: RelayError): void => {
    if (res.writableEnded || res.destroyed) return;
    if (translate?.streams) res.end(translate.broken(err));
    else if (translate) res.destroy(err);
    else res.end(shape.event(err));
  };

  const begin = (): void => {
    if (started) return;
    started = true;
    if (!lease.connect) spares?.refill(host, port); // the next request's socket, now the first byte is out
    opts.onStart?.();
    if (continuing) return; // its head went with the first part
    res.statusCode = status;
    const type = translate?.contentType ?? contentType;
    if (type) res.setHeader('content-type', type);
    if (isSse || translate?.streams) {
      res.setHeader('cache-control', 'no-cache');
      res.setHeader('x-accel-buffering', 'no');
    }
    // Passing the framing on needs the client's response chunked too, and this response first on its
    // connection (a pipelined one waits without a socket): then the head goes now and the body bytes after it.
    if (passRaw && res.socket) {
      res.flushHeaders();
      if (res.chunkedEncoding) raw = res.socket;
    }
  };

  postUpstream(
    up,
    { path: url.pathname + url.search, host: url.host, accept: opts.req.headers.accept ?? '*/*', body: opts.body },
    {
      head(h) {
        contentType = h.headers['content-type'];
        if (h.status >= 400) errorStatus = h.status;
        status = h.status;
        isSse = (contentType ?? '').includes('text/event-stream');
        passRaw = h.chunked && !translate && !continuing;
      },
      body(forward, received) {
        let payload = received;
        if (settled) return;
        if (errorStatus) {
          for (const p of payload) if ((errorBytes += p.byteLength) <= MAX_ERROR_BODY) errorParts.push(p);
          return;
        }
        lastHeard = Date.now();
        // The head and the first bytes leave in one write: the client wakes once for its first token, not twice.
        const corked = !started && passRaw ? res.socket : null;
        corked?.cork();
        begin();
        // A continuation's bytes as the rest of the first part's stream.
        if (continuing) payload = [Buffer.from(continuing.stitch.push(Buffer.concat(payload)))];
        // What the client is given (copied: a transport read is not pinned): in raw passthrough, the whole chunks only.
        if (opts.continuable) for (const b of raw ? forward : payload) sentChunks.push(Buffer.from(b));
        for (const chunk of payload) {
          if (headBytes < HEAD_BYTES) {
            headChunks.push(chunk.subarray(0, HEAD_BYTES - headBytes));
            headBytes += headChunks.at(-1)!.byteLength;
          }
          tailChunks.push(chunk);
          tailBytes += chunk.byteLength;
          while (tailBytes - tailChunks[0]!.byteLength >= TAIL_BYTES) tailBytes -= tailChunks.shift()!.byteLength;
        }
        let full = false;
        if (raw) for (const b of forward) full = !raw.write(b) || full;
        else {
          for (const chunk of payload) {
            const out = translate ? translate.chunk(chunk) : chunk;
            if (out.length > 0) full = !res.write(out) || full;
          }
        }
        corked?.uncork();
        if (full && !draining) {
          // Backpressure: llama-server waits while the client's socket is full (one wait at a time, one listener).
          draining = raw ?? res;
          up.pause();
          draining.once('drain', resume);
        }
      },
      end() {
        if (settled) return;
        if (errorStatus) return answerError();
        begin();
        let rest: string;
        try {
          const stitched = continuing?.stitch.end() ?? '';
          rest = translate ? translate.chunk(Buffer.from(stitched)) + translate.end() : stitched;
        } catch (err) {
          // llama-server's answer made no sense in the other dialect (a tool call's arguments that are not JSON).
          const e = err instanceof RelayError ? err : new RelayError(ErrorCode.LLAMA_SERVER_ERROR, String(err));
          const { status: st, body } = shape.answer(e);
          if (res.headersSent) res.end(translate!.broken(e));
          else sendJson(res, st, body);
          return finish(st);
        }
        // A failure llama-server sent as an `error:` line, its last, which SSE clients would skip (sse-error.ts).
        const failed = isSse && !translate ? endingError(Buffer.concat(tailChunks).toString('utf8')) : null;
        if (failed) log.warn({ model: lease.model.name, placement: lease.placementId, message: failed.message }, 'llama-server ended its stream with an error');
        // Its `error:` line went on as it came (clients skip it): the dialect's own error event ends the stream.
        res.end(failed ? shape.event(failed) : rest);
        finish(failed ? 500 : status);
      },
      broken: brokenUpstream,
    },
  );
  watchTimer = setTimeout(watch, lease.stallMs());
  return outcome;
}
