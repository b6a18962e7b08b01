import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';

/**
 * A stand-in npm registry on 127.0.0.1 for packages not published yet: it serves the given packed tarballs as
 * packages (a packument per name, the tarball with its sha512), and passes every other request through to the
 * registry npm uses here, so `npm install` of one of them resolves its dependencies — and its optional ones, by
 * os and cpu — as it would once they are published.
 */
export interface Registry {
  readonly url: string;
  /** Paths asked of it, in order (the passed-through ones too). */
  readonly requests: string[];
  close(): Promise<void>;
}

const upstream = (): string => spawnSync('npm', ['config', 'get', 'registry'], { encoding: 'utf8' }).stdout.trim().replace(/\/?$/, '/');

export async function startRegistry(tarballs: readonly string[]): Promise<Registry> {
  const requests: string[] = [];
  const real = upstream();
  const local = new Map<string, { manifest: Record<string, unknown>; file: string; bytes: Buffer }>();
  for (const file of tarballs) {
    const manifest = JSON.parse(spawnSync('tar', ['-xzOf', file, 'package/package.json'], { encoding: 'utf8' }).stdout) as Record<string, unknown>;
    local.set(manifest.name as string, { manifest, file, bytes: readFileSync(file) });
  }
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    requests.push(path);
    const name = decodeURIComponent(path.slice(1).split('/-/')[0]!);
    const pkg = local.get(name);
    if (pkg && path.includes('/-/')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': pkg.bytes.length });
      return res.end(pkg.bytes);
    }
    if (pkg) {
      const version = pkg.manifest.version as string;
      const dist = {
        tarball: `${url}/${name}/-/${basename(pkg.file)}`,
        integrity: `sha512-${createHash('sha512').update(pkg.bytes).digest('base64')}`,
        shasum: createHash('sha1').update(pkg.bytes).digest('hex'),
      };
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ name, 'dist-tags': { latest: version }, versions: { [version]: { ...pkg.manifest, _id: `${name}@${version}`, dist } } }));
    }
    void fetch(`${real}${path.slice(1)}`, { headers: { accept: req.headers.accept ?? 'application/json' } }).then(
      async (r) => {
        const body = Buffer.from(await r.arrayBuffer());
        res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/octet-stream', 'content-length': body.length });
        res.end(body);
      },
      (err: Error) => res.writeHead(502).end(err.message),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, requests, close: () => new Promise((r) => server.close(() => r())) };
}
