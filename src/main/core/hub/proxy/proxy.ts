import type { Duplex } from 'node:stream';
import type { ServerResponse } from 'node:http';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { OPENAI_ERRORS, type ErrorShape } from '../http/errors.js';
import { FailedHalt, YieldHalt, type Lease } from '../../scheduler/placements/placement.js';
import { openUpstream, postUpstream, type UpstreamHead } from './upstream-http.js';
import { sendJson } from '../http/answer.js';
import { llamaRefusal } from './llama-answer.js';
import { KeptAnswer } from './kept-answer.js';
import { StallWatch } from './stall-watch.js';
import { endingError } from './sse-error.js';
import { ClientEvents } from './client-events.js';
import type { ProxyOptions, ProxyOutcome } from './proxy-types.js';

/** The most of an error body kept (llama-server's are a line of JSON). */
const MAX_ERROR_BODY = 64 * 1024;

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
export function proxyToPlacement(opts: ProxyOptions): Promise<ProxyOutcome> {
  return new Exchange(opts).run();
}

/**
 * One request's trip to a placement and back, in its steps: `open` the upstream, `listen` for what ends it from
 * outside, `post` the request; then, as llama-server answers, `readHead`, `forward` each piece of the body (the hot
 * path: keep, write, backpressure) and `end`; and the ways out — `finish` (answered), `retry` (nothing sent yet),
 * `broken` (the upstream failed), `halt` (the placement was stopped: `move` when it may continue elsewhere). The
 * stall watch (stall-watch.ts) and what is kept of the answer (kept-answer.ts) are their own.
 */
class Exchange {
  private readonly lease: Lease;
  private readonly res: ServerResponse;
  private readonly shape: ErrorShape;
  private readonly url: URL;
  private readonly kept: KeptAnswer;
  private readonly events: ClientEvents;
  private readonly watch: StallWatch;
  private up!: Duplex;
  private settled = false;
  private resolveOutcome!: (o: ProxyOutcome) => void;
  // What the head said.
  private status = 502;
  private contentType: string | undefined;
  private isSse = false;
  /** llama-server's chunked bytes go to the client's socket as they came (upstream-http.ts says why). */
  private passRaw = false;
  /** An error status: its body, read whole before anything is answered (see answerError). */
  private errorStatus = 0;
  private readonly errorParts: Buffer[] = [];
  private errorBytes = 0;
  // The client's side.
  private started = false;
  private raw: Duplex | null = null;
  /** The socket a backpressure wait listens on for 'drain' (null: not waiting). Left once when the upstream ends. */
  private draining: Duplex | ServerResponse | null = null;

  constructor(private readonly opts: ProxyOptions) {
    this.lease = opts.lease;
    this.res = opts.res;
    this.shape = opts.errors ?? OPENAI_ERRORS;
    this.url = new URL(opts.path, opts.lease.baseUrl);
    this.kept = new KeptAnswer(opts.continuing?.head);
    this.events = new ClientEvents({ reader: opts.reader, continuing: opts.continuing?.stream });
    this.watch = new StallWatch(opts.lease);
  }

  run(): Promise<ProxyOutcome> {
    const outcome = new Promise<ProxyOutcome>((r) => (this.resolveOutcome = r));
    this.open();
    this.listen();
    this.post();
    this.watch.start();
    return outcome;
  }

  /** The upstream: a ready socket to a local llama-server, or a node replica's fresh http stream through its tunnel. */
  private open(): void {
    const { url, opts } = this;
    this.up = openUpstream(this.lease, opts.spares, url.hostname, Number(url.port));
  }

  /** What ends the request from outside: the placement stopped (halt), the client gone. */
  private listen(): void {
    const { lease, res, up } = this;
    up.once('close', () => this.draining?.off('drain', this.resume)); // a client connection kept alive must not collect it
    const halt = (): void => this.halt();
    if (lease.halted.aborted) queueMicrotask(halt);
    else lease.halted.addEventListener('abort', halt, { once: true });
    up.once('close', () => lease.halted.removeEventListener('abort', halt));
    res.on('close', () => {
      if (!res.writableFinished && !this.settled) {
        // The client went away: stop the generation upstream so the slot frees now, not at max_tokens.
        up.destroy();
        this.finish(499);
      }
    });
  }

  /** The request goes upstream; its answer comes back through the steps below. */
  private post(): void {
    const { url, opts } = this;
    postUpstream(
      this.up,
      { path: url.pathname + url.search, host: url.host, accept: opts.req.headers.accept ?? '*/*', body: opts.body },
      {
        head: (h) => this.readHead(h),
        body: (forward, received, whole) => this.forward(forward, received, whole),
        end: () => this.end(),
        broken: (why) => this.broken(why),
      },
    );
  }

  private readHead(h: UpstreamHead): void {
    this.contentType = h.headers['content-type'];
    if (h.status >= 400) this.errorStatus = h.status;
    this.status = h.status;
    this.isSse = (this.contentType ?? '').includes('text/event-stream');
    this.passRaw = h.chunked && !this.opts.translate && !this.opts.continuing;
  }

  /** A piece of the body: kept, written to the client (client-events.ts: what goes on), llama-server paused while it is full. */
  private forward(forward: Buffer[], received: Buffer[], whole: Buffer[]): void {
    if (this.settled) return;
    if (this.errorStatus) {
      for (const p of received) if ((this.errorBytes += p.byteLength) <= MAX_ERROR_BODY) this.errorParts.push(p);
      return;
    }
    const { res, opts } = this;
    this.watch.heard();
    // The head and the first bytes leave in one write: the client wakes once for its first token, not twice.
    const corked = !this.started && this.passRaw ? res.socket : null;
    corked?.cork();
    this.begin();
    let full = false;
    if (this.raw) {
      this.kept.keep(received);
      this.events.given(whole);
      for (const b of forward) full = !this.raw.write(b) || full;
    } else {
      const text = this.events.take(received);
      if (this.events.failed) return this.failMidStream(this.events.failed);
      const payload = typeof text === 'string' ? [Buffer.from(text)] : text;
      this.kept.keep(payload);
      const { translate } = opts;
      for (const chunk of payload) {
        const out = translate ? translate.chunk(chunk) : chunk;
        if (out.length > 0) full = !res.write(out) || full;
      }
    }
    corked?.uncork();
    if (full && !this.draining) {
      // Backpressure: llama-server waits while the client's socket is full (one wait at a time, one listener).
      this.draining = this.raw ?? res;
      this.up.pause();
      this.draining.once('drain', this.resume);
    }
  }

  /** A continuation's llama-server reported a failure mid-stream: the client's stream ends with the dialect's error. */
  private failMidStream(err: RelayError): void {
    this.opts.log.warn({ model: this.lease.model.name, placement: this.lease.placementId, message: err.message }, 'llama-server ended its stream with an error');
    this.up.destroy();
    this.endStream(err);
    this.finish(500);
  }

  private readonly resume = (): void => {
    this.draining = null;
    this.up.resume();
  };

  /** The answer's first byte: the client's head goes out (a continuation's went with its first part). */
  private begin(): void {
    if (this.started) return;
    this.started = true;
    const { res, opts, url } = this;
    if (!this.lease.connect) opts.spares?.refill(url.hostname, Number(url.port)); // the next request's socket, now the first byte is out
    opts.onStart?.();
    if (opts.continuing) return;
    res.statusCode = this.status;
    const type = opts.translate?.contentType ?? this.contentType;
    if (type) res.setHeader('content-type', type);
    if (this.isSse || opts.translate?.streams) {
      res.setHeader('cache-control', 'no-cache');
      res.setHeader('x-accel-buffering', 'no');
    }
    // Passing the framing on needs the client's response chunked too, and this response first on its
    // connection (a pipelined one waits without a socket): then the head goes now and the body bytes after it.
    if (this.passRaw && res.socket) {
      res.flushHeaders();
      if (res.chunkedEncoding) this.raw = res.socket;
    }
  }

  /** llama-server's answer is complete: the rest (a translation's, a stitch's), or its stream's own ending error. */
  private end(): void {
    if (this.settled) return;
    if (this.errorStatus) return this.answerError();
    this.begin();
    const { res, opts, shape } = this;
    let rest: string;
    try {
      const stitched = opts.continuing?.stream.end() ?? '';
      rest = opts.translate ? opts.translate.chunk(Buffer.from(stitched)) + opts.translate.end() : stitched;
    } catch (err) {
      // llama-server's answer made no sense in the other dialect (a tool call's arguments that are not JSON).
      const e = err instanceof RelayError ? err : new RelayError(ErrorCode.LLAMA_SERVER_ERROR, String(err));
      const { status, body } = shape.answer(e);
      if (res.headersSent) res.end(opts.translate!.broken(e));
      else sendJson(res, status, body);
      return this.finish(status);
    }
    // A failure llama-server sent as an `error:` line, its last, which SSE clients would skip (sse-error.ts).
    const failed = this.isSse && !opts.translate ? endingError(this.kept.tailText()) : null;
    if (failed) opts.log.warn({ model: this.lease.model.name, placement: this.lease.placementId, message: failed.message }, 'llama-server ended its stream with an error');
    // Its `error:` line went on as it came (clients skip it): the dialect's own error event ends the stream.
    res.end(failed ? shape.event(failed) : rest);
    this.finish(failed ? 500 : this.status);
  }

  /** An error status, its body whole: llama-server's own refusal goes to the client; anything else is the placement's failure. */
  private answerError(): void {
    const { res, opts, lease, errorStatus } = this;
    const text = Buffer.concat(this.errorParts).toString('utf8');
    const refusal = llamaRefusal(errorStatus, text);
    this.started = true;
    if (refusal) {
      opts.log.info({ model: lease.model.name, placement: lease.placementId, status: errorStatus, code: refusal.code, message: refusal.message.slice(0, 200) }, 'llama-server refused the request');
      const { status, body } = this.shape.answer(refusal);
      if (opts.continuing) this.endStream(refusal);
      else sendJson(res, status, body);
      return this.finish(status);
    }
    if (errorStatus >= 500) {
      this.started = false;
      return this.retry(`llama-server answered ${errorStatus}`);
    }
    // A 4xx without llama-server's JSON (not one it sends): passed on as it is.
    if (opts.continuing) {
      this.endStream(new RelayError(ErrorCode.UPSTREAM_ERROR, `the continuation was answered ${errorStatus}`));
      return this.finish(errorStatus);
    }
    res.statusCode = errorStatus;
    if (this.contentType) res.setHeader('content-type', this.contentType);
    res.end(text);
    this.finish(errorStatus);
  }

  /** A continuation's stream ends with the dialect's error event (its response began on another placement). */
  private endStream(err: RelayError): void {
    const { res, opts } = this;
    if (res.writableEnded || res.destroyed) return;
    if (opts.translate?.streams) res.end(opts.translate.broken(err));
    else if (opts.translate) res.destroy(err);
    else res.end(this.shape.event(err));
  }

  /** Answered: the lease goes back with the answer's token counts. */
  private finish(status: number): void {
    if (this.settled) return;
    this.settled = true;
    this.watch.stop();
    const usage = this.kept.usage();
    this.lease.release(usage);
    this.opts.onDone(status, usage);
    this.resolveOutcome({ kind: 'done' });
  }

  /** Nothing was sent to the client yet: give the request back for another placement. */
  private retry(why: string): void {
    if (this.settled) return;
    this.settled = true;
    const { lease, url } = this;
    this.watch.stop();
    this.up.destroy();
    lease.release();
    if (!lease.connect) this.opts.spares?.refill(url.hostname, Number(url.port));
    const halted = lease.halted.aborted;
    const yielded = lease.halted.reason instanceof YieldHalt;
    this.opts.log[halted ? 'info' : 'warn']({ model: lease.model.name, placement: lease.placementId, why }, `placement ${halted ? 'stopped' : 'failed'} before the first byte: trying another`);
    const error = new RelayError(ErrorCode.UPSTREAM_ERROR, `the placement of "${lease.model.name}" failed before answering (${why})`, { model: lease.model.name });
    this.resolveOutcome({ kind: 'retry', error, halted, ...(yielded ? { yielded } : {}) });
  }

  /** The upstream failed: before the first byte another placement may take it; after it, the client's error. */
  private broken(why: string): void {
    if (this.settled) return;
    if (!this.started) return this.retry(why);
    const { res, opts, lease, shape } = this;
    if (res.writableEnded || res.destroyed) return;
    const err = this.stoppedMidResponse(why);
    opts.log.warn({ model: lease.model.name, placement: lease.placementId, why }, 'upstream broke mid-response');
    if (!res.headersSent) {
      // A translated answer that is one body had sent nothing yet: the client gets a whole error.
      const { status, body } = shape.answer(err);
      sendJson(res, status, body);
    } else if (opts.translate?.streams) res.end(opts.translate.broken(err));
    else if (this.isSse) res.end(shape.event(err));
    else res.destroy(err);
    this.finish(502);
  }

  /**
   * The scheduler stopped the placement (a pause, an eviction): end the request now — before its first byte it goes
   * to another placement, after it the stream ends with its error, or moves — and close the upstream connection, so
   * the llama-server (which stops generating at SIGTERM but keeps an open connection until it is killed) exits at once.
   */
  private halt(): void {
    const why = `stopped: ${String(this.lease.halted.reason)}`;
    if (this.started && this.opts.reader && !this.settled && !this.res.writableEnded && !this.errorStatus && !(this.lease.halted.reason instanceof FailedHalt)) return this.move(why);
    this.broken(why);
    this.up.destroy();
  }

  /** The answer goes on elsewhere (pooled.ts): the client's response stays open, with what it was given. */
  private move(why: string): void {
    const { lease } = this;
    this.settled = true;
    this.watch.stop();
    this.up.destroy();
    lease.release();
    this.opts.log.info({ model: lease.model.name, placement: lease.placementId, why }, 'placement stopped mid-response: moving the answer');
    this.resolveOutcome({ kind: 'moved', error: this.stoppedMidResponse(why), head: this.kept.start(), ...(lease.halted.reason instanceof YieldHalt ? { yielded: true } : {}) });
  }

  private stoppedMidResponse(why: string): RelayError {
    const { lease } = this;
    return new RelayError(ErrorCode.REPLICA_FAILED, `the ${lease.kind === 'shard' ? 'shard' : 'replica'} of "${lease.model.name}" stopped mid-response (${why})`, { model: lease.model.name });
  }
}
