import { basename, dirname, join } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { deriveModelInfo, type ModelInfo } from './derive.js';
import { metaValue, readGgufFile, type GgufFile } from './reader.js';
import { GgufValueType } from './types.js';

/**
 * Split GGUFs (llama.cpp's gguf-split format): a model in N files named `<prefix>-0000i-of-0000N.gguf`. The
 * first holds the metadata and `split.count` (u16); every part holds `split.no` (u16, 0-based) and its share
 * of the tensors; the first's `split.tensors.count` (i32) is the total. llama.cpp is given the first part and
 * finds the others by that naming rule in the same folder, so relay keeps the rule wherever it places parts.
 */
const SPLIT_RE = /^(.+)-(\d{5})-of-(\d{5})\.gguf$/;

/** The most parts a model may have (gguf-split writes at most 99999; a household model has a handful). */
export const MAX_SPLIT_PARTS = 256;

/** `<prefix>-0000i-of-0000N.gguf` → its prefix, 1-based index and count; null when the name is not a part's. */
export function splitName(file: string): { prefix: string; no: number; count: number } | null {
  const m = SPLIT_RE.exec(basename(file));
  if (!m) return null;
  const no = Number(m[2]);
  const count = Number(m[3]);
  return no >= 1 && no <= count ? { prefix: m[1]!, no, count } : null;
}

/** The file name of part `no` (1-based) of `count`, as llama.cpp's llama_split_path writes it. */
export function splitPartName(prefix: string, no: number, count: number): string {
  return `${prefix}-${String(no).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.gguf`;
}

/** A u16 `split.*` value; anything else (absent, another type) is null. */
function u16(file: GgufFile, key: string): number | null {
  const v = file.metadata.get(key);
  return v && v.type === GgufValueType.UINT16 ? Number(v.value) : null;
}

export interface ModelFiles {
  /** The model, read across all its parts (tensor counts and bytes summed, fileSize the sum of the files). */
  readonly info: ModelInfo;
  /** The files in load order: one path for a plain GGUF, every part for a split one. */
  readonly paths: readonly string[];
}

const bad = (path: string, why: string): RelayError => new RelayError(ErrorCode.GGUF_BAD_SPLIT, `${path}: ${why}`, { path });

/**
 * Read a model given by its file: a plain GGUF, or the first part of a split one (then every part is read and
 * checked: present beside it under the naming rule, its `split.no` in order, the tensor total as the first says).
 * A later part given alone is refused with a pointer to the first, as llama-server itself would refuse it.
 */
export function readModelFiles(path: string): ModelFiles {
  const first = readGgufFile(path);
  const count = u16(first, 'split.count');
  if (count === null || count <= 1) return { info: deriveModelInfo(first), paths: [path] };
  const name = splitName(path);
  const no = u16(first, 'split.no');
  if (no !== 0 || !name || name.no !== 1) {
    const firstName = name ? splitPartName(name.prefix, 1, name.count) : 'its -00001-of-… file';
    throw bad(path, `is part ${no === null ? '?' : no + 1} of a split model: give its first part (${firstName})`);
  }
  if (name.count !== count) throw bad(path, `its name says ${name.count} parts but its header says ${count}`);
  if (count > MAX_SPLIT_PARTS) throw bad(path, `${count} parts is more than ${MAX_SPLIT_PARTS}`);
  const paths = [path];
  const files = [first];
  for (let i = 2; i <= count; i++) {
    const p = join(dirname(path), splitPartName(name.prefix, i, count));
    let part: GgufFile;
    try {
      part = readGgufFile(p);
    } catch (err) {
      if ((err as RelayError).code === ErrorCode.IO_ERROR) throw bad(path, `part ${i} of ${count} is missing: ${p}`);
      throw err;
    }
    const partNo = u16(part, 'split.no');
    if (partNo !== i - 1) throw bad(p, `should be part ${i} of ${count} but its header says ${partNo === null ? 'no part number' : `part ${partNo + 1}`}`);
    paths.push(p);
    files.push(part);
  }
  const tensors = files.flatMap((f) => f.tensors);
  const names = new Set<string>();
  for (const t of tensors) {
    if (names.has(t.name)) throw bad(path, `the tensor ${t.name} is in more than one part`);
    names.add(t.name);
  }
  const declared = metaValue(first, 'split.tensors.count');
  if (typeof declared === 'number' && declared !== tensors.length) throw bad(path, `the header declares ${declared} tensors but the parts hold ${tensors.length}`);
  const whole: GgufFile = { ...first, tensors, fileSize: files.reduce((s, f) => s + f.fileSize, 0) };
  return { info: deriveModelInfo(whole), paths };
}
