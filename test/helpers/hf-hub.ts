import { createHash } from 'node:crypto';
import { createReadStream, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in for the part of the Hugging Face Hub's HTTP interface a pull uses (no machine here reaches the
 * real one): on one origin `api/models/{repo}/refs`, `api/models/{repo}/tree/{commit}?recursive=true` (paths,
 * sizes, LFS sha256) and `{repo}/resolve/{commit}/{path}`, which redirects — as the Hub does — to a file server
 * on another origin that answers `Range` and `If-Range` with 206s and ETags. Unknown repositories answer 401
 * `X-Error-Code: RepoNotFound` and gated ones 401 `GatedRepo` without their token, as the Hub does. Every
 * request is recorded; the file server can drop a connection or hold it after some bytes, once per file.
 */
export interface HubFileSpec {
  /** Path inside the repository. */
  readonly path: string;
  /** The file on disk whose bytes are served. */
  readonly source: string;
  /** A wrong sha256 for the listing (a corrupted upload, a hostile mirror). */
  readonly listedSha256?: string;
}

export interface HubRepoSpec {
  readonly files: readonly HubFileSpec[];
  /** Gated: only requests with `Authorization: Bearer <token>` get anything. */
  readonly token?: string;
}

export interface RecordedRequest {
  readonly origin: 'api' | 'files';
  readonly path: string;
  readonly range: string | null;
  readonly authorization: string | null;
  /** Body bytes the file server sent for it. */
  sent: number;
}

export interface FakeHub {
  /** HF_ENDPOINT for the hub. */
  readonly endpoint: string;
  readonly requests: RecordedRequest[];
  readonly commit: string;
  /** The next request for `path` gets `after` bytes, then its connection is destroyed. */
  dropOnce(path: string, after: number): void;
  /** `times` requests for `path`, after the next `skip` of them, are refused by the file server with `status` (an expired signed link, a CDN's 403). */
  refuseOnce(path: string, status: number, times?: number, skip?: number): void;
  /** The next request for `path` gets `after` bytes, then nothing until `release()` (the connection stays open). */
  holdOnce(path: string, after: number): { reached: Promise<void>; release(): void };
  /** Bytes the file server sent for `path`, all requests. */
  sentFor(path: string): number;
  close(): Promise<void>;
}

const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

export async function startFakeHub(repos: Record<string, HubRepoSpec>): Promise<FakeHub> {
  const commit = createHash('sha1')
    .update(JSON.stringify(Object.keys(repos)))
    .digest('hex');
  const hashes = new Map<string, string>();
  const hashOf = (f: HubFileSpec): string => {
    if (!hashes.has(f.source)) hashes.set(f.source, sha(f.source));
    return hashes.get(f.source)!;
  };
  const requests: RecordedRequest[] = [];
  const drops = new Map<string, number>();
  const refusals = new Map<string, { status: number; times: number; skip: number }>();
  const holds = new Map<string, { after: number; reached: () => void; released: Promise<void> }>();
  const blobs = new Map<string, HubFileSpec>();

  const record = (origin: 'api' | 'files', req: IncomingMessage): RecordedRequest => {
    const r: RecordedRequest = {
      origin,
      path: decodeURIComponent(new URL(req.url!, 'http://x').pathname),
      range: req.headers.range ?? null,
      authorization: req.headers.authorization ?? null,
      sent: 0,
    };
    requests.push(r);
    return r;
  };
  const refuse = (res: ServerResponse, code: string, status = 401): void => {
    res.writeHead(status, { 'content-type': 'application/json', 'x-error-code': code });
    res.end(JSON.stringify({ error: code === 'GatedRepo' ? 'Access to this model is restricted: you must be authenticated and have accepted its conditions.' : 'Repository not found' }));
  };

  let filesOrigin = '';
  const api: Server = createServer((req, res) => {
    record('api', req);
    const url = new URL(req.url!, 'http://x');
    const m = /^\/(?:api\/models\/)?([^/]+\/[^/]+)\/(refs|tree\/[0-9a-f]+|resolve\/[0-9a-f]+\/(.+))$/.exec(decodeURIComponent(url.pathname));
    const repo = m ? repos[m[1]!] : undefined;
    if (!m || !repo) return refuse(res, 'RepoNotFound');
    if (repo.token && req.headers.authorization !== `Bearer ${repo.token}`) return refuse(res, 'GatedRepo');
    if (m[2] === 'refs') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ branches: [{ name: 'main', ref: 'refs/heads/main', targetCommit: commit }], tags: [], converts: [] }));
    }
    if (m[2]!.startsWith('tree/')) {
      const listing = [
        { type: 'file', oid: '0'.repeat(40), size: 42, path: 'README.md' },
        ...repo.files.map((f) => {
          const size = statSync(f.source).size;
          return { type: 'file', oid: createHash('sha1').update(f.path).digest('hex'), size, path: f.path, lfs: { oid: f.listedSha256 ?? hashOf(f), size, pointerSize: 135 } };
        }),
      ];
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(listing));
    }
    const f = repo.files.find((x) => x.path === m[3]);
    if (!f) return refuse(res, 'EntryNotFound', 404);
    const key = hashOf(f);
    blobs.set(`${key}/${f.path}`, f);
    res.writeHead(302, {
      location: `${filesOrigin}/blobs/${key}/${encodeURIComponent(f.path)}?sig=abc`,
      'x-linked-size': String(statSync(f.source).size),
      'x-linked-etag': `"${key}"`,
      etag: `"${key}"`,
    });
    res.end();
  });

  const files: Server = createServer((req, res) => {
    const r = record('files', req);
    const url = new URL(req.url!, 'http://x');
    const m = /^\/blobs\/([0-9a-f]{64})\/(.+)$/.exec(url.pathname);
    const f = m ? blobs.get(`${m[1]}/${decodeURIComponent(m[2]!)}`) : undefined;
    if (!m || !f) {
      res.writeHead(404).end();
      return;
    }
    const refusal = refusals.get(f.path);
    if (refusal && refusal.skip > 0) refusal.skip -= 1;
    else if (refusal && refusal.times > 0) {
      refusal.times -= 1;
      res.writeHead(refusal.status).end();
      return;
    }
    const size = statSync(f.source).size;
    const etag = `"${m[1]}"`;
    let start = 0;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const ifRange = req.headers['if-range'];
    if (range && (!ifRange || ifRange === etag)) start = Number(range[1]);
    if (start >= size && size > 0) {
      res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
      return;
    }
    res.writeHead(start > 0 ? 206 : 200, {
      'content-length': String(size - start),
      'accept-ranges': 'bytes',
      etag,
      ...(start > 0 ? { 'content-range': `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    const drop = drops.get(f.path);
    const hold = holds.get(f.path);
    drops.delete(f.path);
    holds.delete(f.path);
    const stopAt = drop ?? hold?.after ?? Infinity;
    const stream = createReadStream(f.source, { start });
    stream.on('data', (chunk: Buffer | string) => {
      const c = chunk as Buffer;
      const room = stopAt - r.sent;
      if (room <= 0) return;
      const piece = c.byteLength > room ? c.subarray(0, room) : c;
      r.sent += piece.byteLength;
      const ok = res.write(piece);
      if (r.sent >= stopAt) {
        stream.destroy();
        // Ended after what was written is flushed: the client has exactly `after` bytes when the connection drops.
        if (drop !== undefined) res.socket?.end();
        else
          hold!.released.then(
            () => res.socket?.destroy(),
            () => undefined,
          );
        hold?.reached();
        return;
      }
      if (!ok) {
        stream.pause();
        res.once('drain', () => stream.resume());
      }
    });
    stream.on('end', () => res.end());
    res.on('close', () => stream.destroy());
  });

  const listen = (s: Server): Promise<number> => new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
  const apiPort = await listen(api);
  filesOrigin = `http://127.0.0.1:${await listen(files)}`;
  return {
    endpoint: `http://127.0.0.1:${apiPort}`,
    requests,
    commit,
    dropOnce: (path, after) => void drops.set(path, after),
    refuseOnce: (path, status, times = 1, skip = 0) => void refusals.set(path, { status, times, skip }),
    holdOnce: (path, after) => {
      let reached!: () => void;
      let release!: () => void;
      const r = new Promise<void>((res) => (reached = res));
      const released = new Promise<void>((res) => (release = res));
      holds.set(path, { after, reached, released });
      return { reached: r, release };
    },
    sentFor: (path) => requests.filter((r) => r.origin === 'files' && r.path.endsWith(`/${path}`)).reduce((n, r) => n + r.sent, 0),
    close: async () => {
      for (const s of [api, files]) s.closeAllConnections();
      await Promise.all([api, files].map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}
