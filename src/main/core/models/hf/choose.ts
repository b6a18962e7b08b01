import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { splitName } from '../../gguf/index.js';
import { importName, quantBits } from '../import.js';

/**
 * What `relay models pull` asks for and which files of a Hugging Face repository answer it, pure. The rule is
 * llama.cpp's `-hf` (common/download.cpp): a quantization tag matches a model file whose name holds `TAG.` or
 * `TAG-` (any case), the first part of a split model stands for all of it, no tag means Q4_K_M (then, where
 * llama.cpp takes Q8_0 or the first file, the quantization nearest 4 bits, so a repo without Q4_K_M still gets
 * a small one), and the projector of a vision model is the mmproj file in the model's folder or above whose
 * quantization is nearest the model's. Where llama.cpp takes the first of several matches, relay lists them.
 */

/** `owner/repo`, `owner/repo:TAG` or `owner/repo/path/in/repo.gguf`; `hf.co/` and `https://huggingface.co/` are dropped. */
export interface PullSpec {
  readonly repo: string;
  readonly tag: string | null;
  readonly file: string | null;
}

/** A file of the repository as its tree lists it. */
export interface RepoFile {
  readonly path: string;
  readonly size: number;
  /** The LFS object's sha256 (every GGUF on the Hub is an LFS file); null for a small git file. */
  readonly sha256: string | null;
}

export interface PullChoice {
  /** The model's files: one, or every part of a split model in order. */
  readonly model: readonly RepoFile[];
  readonly projector: RepoFile | null;
  /** The quantization tag in the chosen file's name ('' when it has none). */
  readonly quant: string;
  /** The registry name it gets without --name: `repo:quant` in lower case (the way Ollama names hf.co pulls). */
  readonly name: string;
}

const REPO_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;

export function parsePullSpec(input: string): PullSpec {
  const s = input
    .trim()
    .replace(/^https?:\/\/(www\.)?huggingface\.co\//i, '')
    .replace(/^hf\.co\//i, '');
  const [owner, rest, ...path] = s.split('/');
  const bad = (): RelayError =>
    new RelayError(ErrorCode.INVALID_REQUEST, `${JSON.stringify(input)} is not a Hugging Face model: give owner/repo, owner/repo:QUANT (e.g. :Q4_K_M) or owner/repo/file.gguf`);
  if (!owner || !rest) throw bad();
  if (path.length > 0) {
    const file = path.join('/');
    if (!REPO_RE.test(`${owner}/${rest}`) || !file.toLowerCase().endsWith('.gguf') || !isRepoPath(file)) throw bad();
    return { repo: `${owner}/${rest}`, tag: null, file };
  }
  const [name, tag, ...more] = rest.split(':');
  const repo = `${owner}/${name}`;
  if (!REPO_RE.test(repo) || more.length > 0 || tag === '' || (tag !== undefined && !/^[A-Za-z0-9_.-]{1,32}$/.test(tag))) throw bad();
  return { repo, tag: tag ?? null, file: null };
}

/** A path inside a repository that cannot leave the folder it is written into (a hostile listing's `../`). */
export function isRepoPath(p: string): boolean {
  if (p.length === 0 || p.length > 1024 || p.startsWith('/') || p.includes('\\') || p.includes('\0')) return false;
  return p.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..');
}

const base = (p: string): string => p.slice(p.lastIndexOf('/') + 1);
const dir = (p: string): string => p.slice(0, Math.max(0, p.lastIndexOf('/')));

/** A GGUF that is a model, not a projector, an importance matrix or a speculative head (llama.cpp's list). */
function isModelFile(path: string): boolean {
  const b = base(path).toLowerCase();
  return b.endsWith('.gguf') && !['mmproj', 'imatrix', 'mtp-', 'eagle3-', 'dflash-', 'dspark-'].some((k) => b.includes(k));
}

/** The quantization tag in a file name: `Qwen2.5-7B-Instruct-Q4_K_M.gguf` → Q4_K_M ('' when none). */
export function quantTag(path: string): string {
  const stem = base(path)
    .replace(/\.gguf$/i, '')
    .replace(/-\d{5}-of-\d{5}$/i, '');
  const t = /[-.]([A-Za-z0-9_]+)$/.exec(stem)?.[1] ?? '';
  return /\d/.test(t) || /^b?f\d+$/i.test(t) ? t : '';
}

/** The first part of a split model, or a file that is not split. */
const isEntry = (path: string): boolean => (splitName(base(path))?.no ?? 1) === 1;

const matchesTag = (path: string, tag: string): boolean => new RegExp(`${tag.replace(/[.]/g, '\\.')}[.-]`, 'i').test(base(path));

/** Every part of the model whose first part is `entry`, in order; an incomplete split is refused. */
function partsOf(files: readonly RepoFile[], entry: RepoFile): RepoFile[] {
  const s = splitName(base(entry.path));
  if (!s) return [entry];
  const parts: RepoFile[] = [];
  for (let no = 1; no <= s.count; no++) {
    const want = `${s.prefix}-${String(no).padStart(5, '0')}-of-${String(s.count).padStart(5, '0')}.gguf`;
    const f = files.find((x) => dir(x.path) === dir(entry.path) && base(x.path) === want);
    if (!f) throw new RelayError(ErrorCode.HF_NO_GGUF, `${entry.path} is part 1 of ${s.count}, but part ${no} (${want}) is not in the repository`, { missing: want });
    parts.push(f);
  }
  return parts;
}

function projectorFor(files: readonly RepoFile[], model: string, tag: string | null): RepoFile | null {
  const bits = tag ? quantBits(`x-${tag}.gguf`) : quantBits(base(model));
  const mdir = dir(model);
  const candidates = files
    .filter((f) => base(f.path).toLowerCase().includes('mmproj') && f.path.toLowerCase().endsWith('.gguf'))
    .filter((f) => dir(f.path) === '' || mdir === dir(f.path) || mdir.startsWith(`${dir(f.path)}/`));
  const depth = (f: RepoFile): number => (dir(f.path) === '' ? 0 : dir(f.path).split('/').length);
  const exact = (f: RepoFile): number => (tag && matchesTag(f.path, tag) ? 1 : 0);
  candidates.sort((a, b) => depth(b) - depth(a) || exact(b) - exact(a) || Math.abs(quantBits(base(a.path)) - bits) - Math.abs(quantBits(base(b.path)) - bits) || a.path.localeCompare(b.path));
  return candidates[0] ?? null;
}

/** The quantizations the repository's models come in (for a message that lists them). */
export function availableQuants(files: readonly RepoFile[]): string[] {
  return [...new Set(files.filter((f) => isModelFile(f.path) && isEntry(f.path)).map((f) => quantTag(f.path) || base(f.path)))].sort();
}

export function choosePull(files: readonly RepoFile[], spec: PullSpec): PullChoice {
  const safe = files.filter((f) => isRepoPath(f.path));
  const models = safe.filter((f) => isModelFile(f.path) && isEntry(f.path));
  const listed = (fs: readonly RepoFile[]): string => fs.map((f) => f.path).join(', ');
  let entry: RepoFile | undefined;
  if (spec.file) {
    entry = safe.find((f) => f.path === spec.file);
    if (!entry)
      throw new RelayError(ErrorCode.HF_FILE_NOT_FOUND, `${spec.repo} has no file ${spec.file}; its GGUF files: ${listed(safe.filter((f) => f.path.endsWith('.gguf'))) || 'none'}`, {
        repo: spec.repo,
      });
    if (!isModelFile(entry.path) || !isEntry(entry.path))
      throw new RelayError(ErrorCode.INVALID_REQUEST, `${spec.file} is not a model file (a projector, an imatrix, or a later part of a split model)`);
  } else {
    if (models.length === 0) throw new RelayError(ErrorCode.HF_NO_GGUF, `${spec.repo} has no GGUF model file (this is not a llama.cpp repository; look for one named …-GGUF)`, { repo: spec.repo });
    let matches: RepoFile[];
    if (spec.tag) {
      matches = models.filter((f) => matchesTag(f.path, spec.tag!));
      if (matches.length === 0) {
        const available = availableQuants(safe);
        throw new RelayError(ErrorCode.HF_QUANT_NOT_FOUND, `${spec.repo} has no ${spec.tag} file; it has ${available.join(', ')}`, { repo: spec.repo, available });
      }
    } else {
      matches = models.filter((f) => matchesTag(f.path, 'Q4_K_M'));
      if (matches.length === 0) {
        const dist = (f: RepoFile): number => Math.abs(quantBits(base(f.path)) - 4) * 2 - (quantBits(base(f.path)) > 4 ? 1 : 0);
        const best = Math.min(...models.map(dist));
        matches = models.filter((f) => dist(f) === best);
        // Several files of that size but different quantizations (Q4_0, Q4_K_S): the largest of them.
        if (new Set(matches.map((f) => quantTag(f.path))).size > 1) matches = [matches.sort((a, b) => b.size - a.size)[0]!];
      }
    }
    if (matches.length > 1) {
      throw new RelayError(ErrorCode.HF_AMBIGUOUS, `${spec.repo} has ${matches.length} files for ${spec.tag ?? 'its default quantization'}: ${listed(matches)}; name one as ${spec.repo}/FILE`, {
        repo: spec.repo,
        choices: matches.map((f) => f.path),
      });
    }
    entry = matches[0]!;
  }
  const model = partsOf(safe, entry);
  const quant = quantTag(entry.path);
  const repoName = spec.repo.slice(spec.repo.indexOf('/') + 1).replace(/-GGUF$/i, '');
  return { model, projector: projectorFor(safe, entry.path, spec.tag), quant, name: importName(`${repoName}${quant ? `:${quant}` : ''}`.toLowerCase()) };
}
