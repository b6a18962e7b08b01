import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Small JSON state files that must survive a crash or a power cut (relay.json, node.json, settings.json).
 * A write goes to a temp file that is fsynced, the current file becomes `<file>.bak` (the last good copy),
 * the temp file is renamed into place, and the directory is fsynced so the renames are on disk too. A reader
 * that finds the current file missing, empty or unparseable starts from the last good copy, and says so.
 */
function fsyncDir(dir: string): void {
  let fd: number | null = null;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    /* a platform without directory fsync (Windows): the renames are still atomic */
  } finally {
    if (fd !== null) closeSync(fd);
  }
}

export function writeDurable(path: string, text: string, mode = 0o644): void {
  const tmp = `${path}.tmp`;
  const fd = openSync(tmp, 'w', mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  if (existsSync(path)) renameSync(path, `${path}.bak`);
  renameSync(tmp, path);
  fsyncDir(dirname(path));
}

export interface DurableRead<T> {
  readonly value: T;
  /** Set when the current file was unreadable and the last good copy was used: why. */
  readonly recovered: string | null;
}

/**
 * Read a state file with `parse` (which throws on content it cannot use). Null when neither the file nor a last
 * good copy exists. When the file is bad and the copy is good, the copy's value with `recovered` saying why;
 * when both are bad, the file's own error is thrown (the files are left untouched).
 */
export function readDurable<T>(path: string, parse: (text: string) => T): DurableRead<T> | null {
  const bak = `${path}.bak`;
  if (!existsSync(path)) {
    if (!existsSync(bak)) return null;
    return { value: parse(readFileSync(bak, 'utf8')), recovered: `${path} is missing` };
  }
  const text = readFileSync(path, 'utf8');
  try {
    if (text.trim() === '') throw new Error(`${path} is empty`);
    return { value: parse(text), recovered: null };
  } catch (err) {
    if (!existsSync(bak)) {
      parse(text); // no copy to fall back on: the parser's own error (an empty file included)
      throw err;
    }
    let value: T;
    try {
      value = parse(readFileSync(bak, 'utf8'));
    } catch {
      throw err;
    }
    return { value, recovered: `${path} is unreadable (${(err as Error).message})` };
  }
}
