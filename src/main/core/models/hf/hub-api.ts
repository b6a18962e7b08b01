import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { RepoFile } from './choose.js';

/**
 * The part of the Hugging Face Hub's HTTP interface a pull uses, as llama.cpp's `-hf` (common/hf-cache.cpp) and
 * huggingface_hub use it: `GET api/models/{repo}/refs` for the commit `main` points at, `GET
 * api/models/{repo}/tree/{commit}?recursive=true` for the files with their LFS sha256 and sizes, and `{repo}/resolve/
 * {commit}/{path}` for the bytes (a redirect to a file server). The Hub says what went wrong in `X-Error-Code`:
 * RepoNotFound (also for a private repo without a token), GatedRepo, RevisionNotFound, EntryNotFound.
 */
export interface HubAccess {
  /** HF_ENDPOINT (mirrors), default https://huggingface.co; no trailing slash. */
  readonly endpoint: string;
  /** HF_TOKEN or the token file: sent only to the endpoint's own origin, never logged. */
  readonly token: string | null;
}

const API_TIMEOUT_MS = 30_000;

/** Headers for a request to `url`: the token only on the endpoint's own origin (not on a file server it redirects to). */
export function hubHeaders(access: HubAccess, url: string, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': 'relay (llama.cpp pool)', ...extra };
  if (access.token && new URL(url).origin === new URL(access.endpoint).origin) h.authorization = `Bearer ${access.token}`;
  return h;
}

/** A Hub answer that is not a success, as the error a user reads. */
export function hubError(status: number, errorCode: string | null, repo: string, access: HubAccess, what: string): RelayError {
  if (errorCode === 'GatedRepo' || (status === 403 && errorCode !== 'RepoNotFound')) {
    const how = access.token
      ? 'the token relay sent (HF_TOKEN) has no access yet: accept the terms on the model page with that account'
      : 'set HF_TOKEN for the hub (a token of an account that accepted the terms on the model page)';
    return new RelayError(ErrorCode.HF_GATED, `${repo} is gated: ${how}`, { repo, status });
  }
  if (errorCode === 'RepoNotFound' || status === 404 || status === 401) {
    const hint = access.token ? '' : ' (a private repository needs HF_TOKEN)';
    return new RelayError(ErrorCode.HF_REPO_NOT_FOUND, `no model repository ${repo} on ${access.endpoint}${hint}`, { repo, status });
  }
  if (errorCode === 'EntryNotFound') return new RelayError(ErrorCode.HF_FILE_NOT_FOUND, `${what}: not in ${repo}`, { repo, status });
  return new RelayError(ErrorCode.HF_UNREACHABLE, `${access.endpoint} answered ${status} for ${what}`, { repo, status });
}

async function apiGet(access: HubAccess, path: string, repo: string): Promise<unknown> {
  const url = `${access.endpoint}/${path}`;
  let r: Response;
  try {
    r = await fetch(url, { headers: hubHeaders(access, url, { accept: 'application/json' }), signal: AbortSignal.timeout(API_TIMEOUT_MS) });
  } catch (err) {
    throw new RelayError(ErrorCode.HF_UNREACHABLE, `cannot reach ${access.endpoint}: ${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}`, {
      repo,
    });
  }
  if (!r.ok) throw hubError(r.status, r.headers.get('x-error-code'), repo, access, path);
  try {
    return await r.json();
  } catch {
    throw new RelayError(ErrorCode.HF_UNREACHABLE, `${access.endpoint} sent something that is not JSON for ${path}`, { repo });
  }
}

/** The commit the repository's `main` branch points at (else its first branch). */
export async function resolveCommit(access: HubAccess, repo: string): Promise<string> {
  const j = (await apiGet(access, `api/models/${repo}/refs`, repo)) as { branches?: { name?: unknown; targetCommit?: unknown }[] };
  const branches = (Array.isArray(j.branches) ? j.branches : []).filter((b) => typeof b.name === 'string' && typeof b.targetCommit === 'string' && /^[0-9a-f]{40}$/.test(b.targetCommit));
  const b = branches.find((x) => x.name === 'main') ?? branches[0];
  if (!b) throw new RelayError(ErrorCode.HF_REPO_NOT_FOUND, `${repo} has no branch to download from`, { repo });
  return b.targetCommit as string;
}

/** Every file at `commit`, with its size and (for LFS files) sha256. */
export async function listFiles(access: HubAccess, repo: string, commit: string): Promise<RepoFile[]> {
  const j = await apiGet(access, `api/models/${repo}/tree/${commit}?recursive=true`, repo);
  if (!Array.isArray(j)) throw new RelayError(ErrorCode.HF_UNREACHABLE, `${access.endpoint} sent no file list for ${repo}`, { repo });
  const out: RepoFile[] = [];
  for (const it of j as { type?: unknown; path?: unknown; size?: unknown; lfs?: { oid?: unknown; size?: unknown } }[]) {
    if (it.type !== 'file' || typeof it.path !== 'string') continue;
    const lfsOid = typeof it.lfs?.oid === 'string' && /^[0-9a-f]{64}$/.test(it.lfs.oid) ? it.lfs.oid : null;
    const size = typeof it.lfs?.size === 'number' ? it.lfs.size : typeof it.size === 'number' ? it.size : -1;
    if (!Number.isSafeInteger(size) || size < 0) continue;
    out.push({ path: it.path, size, sha256: lfsOid });
  }
  return out;
}

/** Where a file's bytes are asked for (the Hub redirects to its file servers). */
export function resolveUrl(access: HubAccess, repo: string, commit: string, path: string): string {
  return `${access.endpoint}/${repo}/resolve/${commit}/${path.split('/').map(encodeURIComponent).join('/')}`;
}
