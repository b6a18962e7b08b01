import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError, wireCode } from '../../../../shared/errors.js';
import type { PullView } from '../../../../shared/status.js';
import { sha256File } from '../describe.js';
import { checkModelName } from '../registry.js';
import { choosePull, parsePullSpec, type RepoFile } from './choose.js';
import { downloadFile, partOf } from './download.js';
import { OneWriterPerFile } from './one-writer.js';
import { listFiles, resolveCommit, resolveUrl, type HubAccess } from './hub-api.js';

/**
 * The hub's pulls from Hugging Face: `start` resolves the repository and chooses the files (errors come back at
 * once: not found, gated, no such quantization, no room on disk), then downloads them in the background; each job
 * is written to `<downloads>/.pulls/<id>.json` first, so a hub restarted mid-download picks it up again where
 * the part files stop. A finished job registers the model (with the hashes the download computed: no second
 * pass) and is removed from disk; the last finished ones stay listed for the CLI and the dashboard.
 */

interface PullFile extends RepoFile {
  readonly url: string;
  readonly dest: string;
}

interface PullJob {
  readonly id: string;
  readonly spec: string;
  readonly repo: string;
  readonly commit: string;
  readonly name: string;
  readonly quant: string;
  readonly files: readonly PullFile[];
  readonly projector: PullFile | null;
  readonly startedAt: number;
}

interface Live {
  readonly job: PullJob;
  state: PullView['state'];
  have: number[];
  rate: { bps: number; at: number; bytes: number };
  error: { code: string; message: string } | null;
  abort: AbortController;
  cancelled: 'delete' | 'keep' | null;
  done: Promise<void>;
  endedAt: number | null;
}

/** What registering a finished pull needs: the model's first file, its projector, and every file's sha256. */
export type RegisterPull = (p: { name: string; path: string; projector: string | null; hashes: ReadonlyMap<string, string> }) => Promise<void>;

/** Room left on the disk beyond the files themselves (their folder, the store, the logs). */
const DISK_MARGIN_BYTES = 64 * 1024 * 1024;
/** Finished pulls kept in the list. */
const KEEP_FINISHED = 20;

export class Pulls {
  private readonly live = new Map<string, Live>();
  /** One download per file: a second pull that wants it waits for the first (one-writer.ts). */
  private readonly files = new OneWriterPerFile();
  private readonly jobsDir: string;

  constructor(
    private readonly d: {
      readonly dir: string;
      readonly access: HubAccess;
      readonly log: Logger;
      /** The registered model of this name, if any: its first file's path. */
      registered(name: string): string | null;
      register: RegisterPull;
    },
  ) {
    this.jobsDir = join(d.dir, '.pulls');
  }

  /** Pick up the pulls a previous run of the hub left unfinished. */
  resumeAll(): void {
    if (!existsSync(this.jobsDir)) return;
    for (const f of readdirSync(this.jobsDir).filter((x) => x.endsWith('.json'))) {
      try {
        const job = JSON.parse(readFileSync(join(this.jobsDir, f), 'utf8')) as PullJob;
        this.d.log.info({ pull: job.id, repo: job.repo, name: job.name }, 'resuming a pull the hub had not finished');
        this.run(job);
      } catch (err) {
        this.d.log.warn({ file: f, message: (err as Error).message }, 'an unreadable pull record: removed');
        rmSync(join(this.jobsDir, f), { force: true });
      }
    }
  }

  /** Resolve `spec`, check it can be stored, and start downloading; the job as /status shows it. */
  async start(spec: string, name?: string): Promise<PullView> {
    const s = parsePullSpec(spec);
    if (name !== undefined) checkModelName(name); // before anything is asked of the Hub, let alone fetched
    const commit = await resolveCommit(this.d.access, s.repo);
    const files = await listFiles(this.d.access, s.repo, commit);
    const choice = choosePull(files, s);
    const finalName = name ?? choice.name;
    checkModelName(finalName);
    const folder = join(this.d.dir, ...s.repo.split('/'), commit.slice(0, 12));
    const asFile = (f: RepoFile): PullFile => ({ ...f, url: resolveUrl(this.d.access, s.repo, commit, f.path), dest: join(folder, ...f.path.split('/')) });
    const job: PullJob = {
      id: randomBytes(6).toString('hex'),
      spec,
      repo: s.repo,
      commit,
      name: finalName,
      quant: choice.quant,
      files: choice.model.map(asFile),
      projector: choice.projector ? asFile(choice.projector) : null,
      startedAt: Date.now(),
    };
    const entry = job.files[0]!.dest;
    const registered = this.d.registered(finalName);
    if (registered !== null && registered !== entry) {
      throw new RelayError(ErrorCode.MODEL_EXISTS, `a model named "${finalName}" is already registered for ${registered}; remove it first or give --name`, { model: finalName });
    }
    const running = [...this.live.values()].filter((l) => l.endedAt === null);
    const same = running.find((l) => l.job.files[0]!.dest === entry);
    if (same) return this.view(same);
    const other = running.find((l) => l.job.name === finalName);
    if (other) throw new RelayError(ErrorCode.MODEL_EXISTS, `a pull of ${other.job.spec} is already downloading "${finalName}"; wait for it or give --name`, { model: finalName });
    const all = filesOf(job);
    // A file another running pull fetches is counted once, there (this pull waits for it: one download per file).
    const shared = new Set(running.flatMap((l) => filesOf(l.job).map((f) => f.dest)));
    const need = all.filter((f) => !shared.has(f.dest)).reduce((n, f) => n + f.size - onDisk(f), 0);
    mkdirSync(folder, { recursive: true });
    const fs = statfsSync(folder);
    // What running pulls will still write is spoken for: two pulls that each fit alone may not fit together.
    const pending = new Map(running.flatMap((l) => filesOf(l.job).map((f) => [f.dest, f.size - onDisk(f)] as const))); // a shared file once
    const reserved = [...pending.values()].reduce((n, b) => n + b, 0);
    const free = Number(fs.bavail) * Number(fs.bsize) - reserved;
    if (need + DISK_MARGIN_BYTES > free) {
      const also = reserved > 0 ? ` (after the ${gb(reserved)} the pulls already running will still write)` : '';
      throw new RelayError(ErrorCode.DISK_FULL, `${s.repo} needs ${gb(need)} more and ${folder} has ${gb(Math.max(0, free))} free${also}: nothing was downloaded`, {
        need_bytes: need,
        free_bytes: Math.max(0, free),
        reserved_bytes: reserved,
        path: folder,
      });
    }
    mkdirSync(this.jobsDir, { recursive: true });
    writeFileSync(join(this.jobsDir, `${job.id}.json`), JSON.stringify(job));
    this.d.log.info({ pull: job.id, repo: job.repo, commit, files: all.map((f) => f.path), bytes: need, name: finalName }, 'pull started');
    return this.view(this.run(job));
  }

  list(): PullView[] {
    return [...this.live.values()].map((l) => this.view(l));
  }

  get(id: string): PullView {
    return this.view(this.require(id));
  }

  /** Stop a pull: its part files are deleted, or kept (`keep`) so that pulling it again resumes. */
  async cancel(id: string, keep = false): Promise<PullView> {
    const l = this.require(id);
    if (l.endedAt === null) {
      l.cancelled = keep ? 'keep' : 'delete';
      l.abort.abort(new RelayError(ErrorCode.PULL_CANCELLED, 'cancelled'));
      await l.done;
    }
    return this.view(l);
  }

  /** The hub stops: downloads stop with their part files and records kept, to resume at the next start. */
  async close(): Promise<void> {
    const running = [...this.live.values()].filter((l) => l.endedAt === null);
    for (const l of running) l.abort.abort(new Error('the hub is stopping'));
    await Promise.all(running.map((l) => l.done));
  }

  private require(id: string): Live {
    const l = this.live.get(id);
    if (!l) throw new RelayError(ErrorCode.PULL_NOT_FOUND, `no pull ${id}`, { pull: id });
    return l;
  }

  private run(job: PullJob): Live {
    const all = filesOf(job);
    const l: Live = {
      job,
      state: 'downloading',
      have: all.map(() => 0),
      rate: { bps: 0, at: Date.now(), bytes: 0 },
      error: null,
      abort: new AbortController(),
      cancelled: null,
      done: Promise.resolve(),
      endedAt: null,
    };
    this.live.set(job.id, l);
    l.done = this.download(l, all)
      .catch((err: unknown) => {
        // download() settles every outcome itself; anything else still marks the pull failed, never goes unobserved.
        l.state = 'failed';
        l.error = { code: wireCode(ErrorCode.INTERNAL), message: (err as Error).message };
        this.d.log.error({ pull: job.id, message: (err as Error).message }, 'pull failed');
      })
      .finally(() => {
        l.endedAt = Date.now();
        this.trim();
      });
    return l;
  }

  private async download(l: Live, all: readonly PullFile[]): Promise<void> {
    const { job } = l;
    const hashes = new Map<string, string>();
    try {
      for (const [i, f] of all.entries()) {
        mkdirSync(dirname(f.dest), { recursive: true });
        if (existsSync(f.dest) && statSync(f.dest).size === f.size) {
          // Verified by a pull of this hub (one-writer.ts), or downloaded before a restart that came ahead of the
          // registration: then read once to be sure of it.
          const sha = this.files.verifiedSha(f.dest, f.size) ?? (await sha256File(f.dest));
          if (f.sha256 && sha !== f.sha256) rmSync(f.dest, { force: true });
          else {
            hashes.set(f.dest, sha);
            l.have[i] = f.size;
            continue;
          }
        }
        const sha = await this.files.fetch(f.dest, f.size, l.abort.signal, () =>
          downloadFile(
            { url: f.url, dest: f.dest, size: f.size, sha256: f.sha256, repo: job.repo, path: f.path },
            {
              access: this.d.access,
              signal: l.abort.signal,
              onBytes: (have) => this.progress(l, i, have),
              onRetry: (message, inMs) => this.d.log.warn({ pull: job.id, file: f.path, message, retry_in_ms: inMs }, 'download interrupted: resuming'),
            },
          ),
        );
        l.have[i] = f.size;
        hashes.set(f.dest, sha);
      }
      l.state = 'registering';
      await this.d.register({ name: job.name, path: job.files[0]!.dest, projector: job.projector?.dest ?? null, hashes });
      l.state = 'done';
      this.forgetJob(job);
      this.d.log.info({ pull: job.id, name: job.name, seconds: Math.round((Date.now() - job.startedAt) / 1000) }, 'pull finished: model registered');
    } catch (err) {
      if (l.cancelled) {
        l.state = 'cancelled';
        this.forgetJob(job);
        if (l.cancelled === 'delete') for (const f of this.ownFiles(l)) this.remove(partOf(f.dest));
        this.d.log.info({ pull: job.id, kept_parts: l.cancelled === 'keep' }, 'pull cancelled');
        return;
      }
      if (l.abort.signal.aborted) {
        l.state = 'stopped'; // the hub stops: the record stays for the next start
        return;
      }
      const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, String(err));
      l.state = 'failed';
      l.error = { code: wireCode(e.code), message: e.message };
      // A network loss or a full disk keeps what came (pull again to resume); anything else starts over next time.
      if (e.code !== ErrorCode.HF_UNREACHABLE && e.code !== ErrorCode.DISK_FULL) for (const f of this.ownFiles(l)) this.remove(partOf(f.dest));
      this.forgetJob(job);
      this.d.log.warn({ pull: job.id, code: e.code, message: e.message }, 'pull failed');
    }
  }

  private progress(l: Live, i: number, have: number): void {
    l.have[i] = have;
    const now = Date.now();
    const total = l.have.reduce((a, b) => a + b, 0);
    if (now - l.rate.at >= 1000) {
      const bps = ((total - l.rate.bytes) * 1000) / (now - l.rate.at);
      l.rate = { bps: l.rate.bps === 0 ? bps : 0.7 * l.rate.bps + 0.3 * bps, at: now, bytes: total };
    }
  }

  private forgetJob(job: PullJob): void {
    this.remove(join(this.jobsDir, `${job.id}.json`));
  }

  /** `l`'s files no other running pull wants: those its end may delete (a shared projector's part is the other's too). */
  private ownFiles(l: Live): PullFile[] {
    const others = new Set([...this.live.values()].filter((o) => o !== l && o.endedAt === null).flatMap((o) => filesOf(o.job).map((f) => f.dest)));
    return filesOf(l.job).filter((f) => !others.has(f.dest));
  }

  /** Cleanup that cannot fail the pull (or the hub): a file held open elsewhere (Windows' EBUSY), a folder in its place. */
  private remove(path: string): void {
    try {
      rmSync(path, { force: true });
    } catch (err) {
      this.d.log.warn({ path, message: (err as Error).message }, 'could not remove a download file: left behind');
    }
  }

  private trim(): void {
    const ended = [...this.live.values()].filter((l) => l.endedAt !== null).sort((a, b) => a.endedAt! - b.endedAt!);
    for (const l of ended.slice(0, Math.max(0, ended.length - KEEP_FINISHED))) this.live.delete(l.job.id);
  }

  private view(l: Live): PullView {
    const { job } = l;
    const all = filesOf(job);
    const total = all.reduce((a, f) => a + f.size, 0);
    const done = l.have.reduce((a, b) => a + b, 0);
    const bps = Math.round(l.rate.bps);
    return {
      id: job.id,
      spec: job.spec,
      repo: job.repo,
      commit: job.commit,
      name: job.name,
      quant: job.quant,
      files: all.map((f) => ({ path: f.path, size: f.size })),
      projector: job.projector?.path ?? null,
      state: l.state,
      done_bytes: done,
      total_bytes: total,
      rate_bps: bps,
      eta_s: l.state === 'downloading' && bps > 0 ? Math.ceil((total - done) / bps) : null,
      error: l.error,
      started_at: new Date(job.startedAt).toISOString(),
    };
  }
}

/** Bytes of `f` already on disk: the whole file, or its part so far. */
const onDisk = (f: PullFile): number => (existsSync(f.dest) ? f.size : existsSync(partOf(f.dest)) ? Math.min(f.size, statSync(partOf(f.dest)).size) : 0);

/** Everything a pull fetches: the model's files, then its projector. */
const filesOf = (job: PullJob): PullFile[] => [...job.files, ...(job.projector ? [job.projector] : [])];

const gb = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : `${(n / 1e6).toFixed(0)} MB`);
