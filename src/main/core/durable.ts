import { closeSync, copyFileSync, existsSync, fsyncSync, linkSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Small JSON state files that must survive a crash or a power cut (relay.json, node.json, settings.json).
 * A write goes to a temp file that is fsynced; the current file is linked to `<file>.bak` (the last good copy)
 * under a temp name that is renamed over the old copy; the temp file is renamed over the current file; the
 * directory is fsynced so the renames are on disk too. Every rename replaces its target atomically, so at no
 * moment of a write is there no current file: a crash anywhere leaves the committed state or the new one
 * (test/unit/durable.test.ts crashes after each step). A reader that finds the current file missing, empty or
 * unparseable starts from the last good copy, and says so.
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

function writeSynced(path: string, text: string, mode: number): void {
  const fd = openSync(path, 'w', mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** One step of a durable write, named for the tests that crash after it. */
export interface DurableStep {
  readonly what: string;
  run(): void;
}

/** The steps of writing `text` to `path`, in order (writeDurable runs them all). */
export function durableWriteSteps(path: string, text: string, mode = 0o644): DurableStep[] {
  const tmp = `${path}.tmp`;
  const bak = `${path}.bak`;
  const bakTmp = `${path}.bak.tmp`;
  return [
    { what: 'write and fsync the temp file', run: () => writeSynced(tmp, text, mode) },
    {
      what: 'link the current file as the next last good copy',
      run: () => {
        if (!existsSync(path)) return;
        rmSync(bakTmp, { force: true });
        try {
          linkSync(path, bakTmp);
        } catch {
          copyFileSync(path, bakTmp); // a filesystem without hard links (FAT): a copy does the same
        }
      },
    },
    {
      what: 'rename it over the last good copy',
      run: () => {
        if (existsSync(bakTmp)) renameSync(bakTmp, bak);
      },
    },
    { what: 'rename the temp file over the current file', run: () => renameSync(tmp, path) },
    { what: 'fsync the directory', run: () => fsyncDir(dirname(path)) },
  ];
}

export function writeDurable(path: string, text: string, mode = 0o644): void {
  for (const step of durableWriteSteps(path, text, mode)) step.run();
}

export interface DurableRead<T> {
  readonly value: T;
  /** Set when the current file was unreadable and the last good copy was used: why. */
  readonly recovered: string | null;
}

/**
 * Read a state file with `parse` (which throws on content it cannot use). Null when neither the file nor a last
 * good copy exists. When the file is bad and the copy is good, the copy's value with `recovered` saying why, and
 * the bad file is moved aside (kept once as `<file>.unreadable`, to look at): the next write then makes a new
 * current file and leaves the last good copy as it is, instead of making the unreadable file the copy. When both
 * are bad, the file's own error is thrown (the files are left untouched).
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
    renameSync(path, `${path}.unreadable`);
    return { value, recovered: `${path} is unreadable (${(err as Error).message})` };
  }
}
