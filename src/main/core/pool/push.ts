import { createReadStream } from 'node:fs';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import { ErrorCode, RelayError, fromWireCode } from '../../../shared/errors.js';
import type { YamuxStream } from '../tunnel/yamux/session.js';
import type { ModelPart, ModelRecord } from '../store/store.js';
import { modelFiles, servedFiles } from '../models/files.js';
import { PROBE_EVERY_MS, type NodeConn } from './conn.js';

export interface PushProgress {
  node: string;
  model: string;
  sha256: string;
  done: number;
  total: number;
  started_at: string;
}

/**
 * The hub's weight pushes: every file of a model a node lacks, over a file stream, resumed from the node's
 * partial file, verified by the node's sha256 (once more from zero on a mismatch), optionally paced.
 */
export class WeightPusher {
  /** Pushes running now, by node:sha256 (the dashboard's bars, /status). */
  readonly pushes = new Map<string, PushProgress>();

  constructor(private readonly deps: { log: Logger; pushMaxBytesPerSec?: number; stallMs?: number }) {}

  /**
   * Make sure `node` holds `model`'s bytes (sha256-verified by the node): resume a partial push, re-push once
   * from zero if the bytes arrived corrupted.
   */
  private readonly pushing = new Map<string, Promise<void>>();

  /** Push every file of `model` the node lacks (each part of a split model is a file of its own, its projector and draft model too), in order. */
  async push(conn: NodeConn, model: ModelRecord): Promise<void> {
    const parts = modelFiles(model);
    const files = servedFiles(model);
    for (const [i, f] of files.entries()) {
      if (conn.cache.has(f.sha256)) continue;
      const siblings = files.filter((x) => x.sha256 !== f.sha256).map((x) => x.sha256);
      const label =
        f.sha256 === model.draft?.sha256
          ? `${model.name} (its draft model ${model.draft.name})`
          : i >= parts.length
            ? `${model.name} (its projector)`
            : parts.length > 1
              ? `${model.name} (part ${i + 1} of ${parts.length})`
              : model.name;
      await this.pushFile(conn, label, f, siblings);
    }
  }

  private pushFile(conn: NodeConn, label: string, file: ModelPart, siblings: string[]): Promise<void> {
    // One push per (node, file) at a time: concurrent first requests wait for the same bytes.
    const key = `${conn.name}:${file.sha256}`;
    let p = this.pushing.get(key);
    if (!p) {
      p = this.pushOnce(conn, label, file, siblings).finally(() => this.pushing.delete(key));
      this.pushing.set(key, p);
    }
    return p;
  }

  /**
   * A push's watchdog. No byte for PROBE_EVERY_MS: the node is pinged (a dead link ends the session in seconds,
   * and the push with it). No byte for the stall limit while the node answers (its disk stopped taking writes):
   * the push fails with PUSH_STALLED, which counts against the node. Waiting for the verdict after the last byte
   * (the node verifies the hash) only pings.
   */
  private watch(conn: NodeConn, label: string, st: YamuxStream, progress: PushProgress): { stalled: RelayError | null; stop(): void } {
    const limit = this.deps.stallMs ?? PUSH_STALL_MS;
    let last = progress.done;
    let quietSince = Date.now();
    let nextProbe = quietSince + PROBE_EVERY_MS;
    const w = {
      stalled: null as RelayError | null,
      stop: () => clearInterval(timer),
    };
    const timer = setInterval(() => {
      const now = Date.now();
      if (progress.done !== last) {
        last = progress.done;
        quietSince = now;
        nextProbe = now + PROBE_EVERY_MS;
        return;
      }
      if (now >= nextProbe) {
        nextProbe = now + PROBE_EVERY_MS;
        void conn.probe(`a weight push of ${label} made no progress`);
      }
      if (progress.done < progress.total && now - quietSince >= limit && !w.stalled) {
        w.stalled = new RelayError(ErrorCode.PUSH_STALLED, `push of ${label} to node ${conn.name} moved no byte for ${Math.round((now - quietSince) / 1000)} s while the node answered pings`, {
          node: conn.name,
        });
        this.deps.log.warn({ node: conn.name, model: label, done: progress.done, total: progress.total }, 'weight push stalled: giving up');
        st.destroy(w.stalled);
      }
    }, WATCH_TICK_MS);
    timer.unref();
    return w;
  }

  private async pushOnce(conn: NodeConn, label: string, file: ModelPart, siblings: string[]): Promise<void> {
    const { sha256, size } = file;
    for (let attempt = 0; ; attempt++) {
      const begin = await conn.command({ type: 'push-begin', sha256, size, ...(siblings.length > 0 ? { siblings } : {}) }, 30_000);
      const offset = begin.data?.offset;
      if (begin.data?.present === true) {
        conn.cache.set(sha256, size);
        return;
      }
      if (typeof offset !== 'number') throw new RelayError(ErrorCode.UPSTREAM_ERROR, `node ${conn.name} gave no push offset`);
      const key = `${conn.name}:${sha256}`;
      const progress: PushProgress = { node: conn.name, model: label, sha256, done: offset, total: size, started_at: new Date().toISOString() };
      this.pushes.set(key, progress);
      this.deps.log.info({ node: conn.name, model: label, offset, size }, offset > 0 ? 'resuming weight push' : 'pushing weights');
      let watch: { stalled: RelayError | null; stop(): void } | null = null;
      try {
        const st = conn.open({ kind: 'file', sha256, offset, size });
        watch = this.watch(conn, label, st, progress);
        const result = readResult(st);
        const counter = new Transform({
          transform: (chunk: Buffer, _e, cb) => {
            progress.done += chunk.byteLength;
            conn.bytes.file += chunk.byteLength;
            cb(null, chunk);
          },
        });
        const src = createReadStream(file.path, { start: offset, highWaterMark: 1024 * 1024 });
        const limited = this.deps.pushMaxBytesPerSec ? [rateLimit(this.deps.pushMaxBytesPerSec)] : [];
        await (pipeline as (streams: unknown[], opts: { end: boolean }) => Promise<void>)([src, ...limited, counter, st], { end: true });
        const r = await result;
        if (r.ok) {
          conn.cache.set(sha256, size);
          this.deps.log.info({ node: conn.name, model: label }, 'weights pushed and verified');
          return;
        }
        if (r.code === 'hash_mismatch' && attempt === 0) {
          this.deps.log.warn({ node: conn.name, model: label, message: r.message }, 'pushed weights failed verification: pushing again from zero');
          continue;
        }
        if (watch.stalled) throw watch.stalled;
        throw new RelayError(r.code ? fromWireCode(r.code) : ErrorCode.UPSTREAM_ERROR, `push to node ${conn.name} failed: ${r.message}`, { node: conn.name });
      } catch (err) {
        throw watch?.stalled ?? err;
      } finally {
        watch?.stop();
        this.pushes.delete(key);
      }
    }
  }
}

/** A push that moves no byte for this long, while the node still answers pings, fails (RELAY_PUSH_STALL_MS). */
export const PUSH_STALL_MS = 30_000;
/** How often the push watch looks at the progress. */
const WATCH_TICK_MS = 500;

/** The most a node's verdict on a push may be: one line of JSON. More is a broken or hostile node. */
const MAX_VERDICT_BYTES = 64 * 1024;

/** The node's one-line verdict at the end of a file stream (bounded: a node cannot make the hub buffer more). */
function readResult(st: YamuxStream): Promise<{ ok: boolean; code?: string; message?: string }> {
  return new Promise((resolve) => {
    let buf = '';
    st.setEncoding('utf8');
    st.on('data', (c: string) => {
      buf += c;
      if (buf.length > MAX_VERDICT_BYTES) {
        resolve({ ok: false, code: 'tunnel_protocol', message: `the node answered the push with over ${MAX_VERDICT_BYTES} bytes` });
        st.destroy();
      }
    });
    st.on('end', () => {
      try {
        resolve(JSON.parse(buf.trim()) as { ok: boolean; code?: string; message?: string });
      } catch {
        resolve({ ok: false, code: 'push_incomplete', message: 'the node closed the push without a verdict' });
      }
    });
    st.on('error', (err: Error) => resolve({ ok: false, code: 'push_incomplete', message: err.message }));
  });
}

/** Pace a byte stream to `bytesPerSec` (RELAY_PUSH_MAX_MBPS: a weight push need not flood a home network). */
export function rateLimit(bytesPerSec: number): Transform {
  const t0 = Date.now();
  let sent = 0;
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      sent += chunk.byteLength;
      const due = t0 + (sent / bytesPerSec) * 1000;
      const wait = due - Date.now();
      if (wait > 0) setTimeout(() => cb(null, chunk), wait);
      else cb(null, chunk);
    },
  });
}
