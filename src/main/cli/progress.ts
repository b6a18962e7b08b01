import type { EventEmitter } from 'node:events';

/**
 * Progress a person can read on a terminal: one line per running task, redrawn in place (`\r`), with the
 * rate and the time left. Off a terminal (a log file, a service, CI) the same progress goes to the log as a
 * plain line every 10% instead, so logs stay short and free of control characters.
 */

export interface BarInput {
  readonly label: string;
  readonly done: number;
  /** 0 when unknown. */
  readonly total: number;
  readonly elapsedMs: number;
  /** 'bytes': show MB/s; 'percent': `done`/`total` are percents (a build), no rate. */
  readonly unit: 'bytes' | 'percent';
  readonly width?: number;
  /** Where the task started (a resumed push): the rate and the time left count only what moved since. */
  readonly base?: number;
}

const clock = (s: number): string => {
  const t = Math.max(0, Math.round(s));
  const h = Math.floor(t / 3600);
  const m = Math.floor((t % 3600) / 60);
  const sec = String(t % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
};

/** `label [#########...........] 45%  118.2 MB/s  ETA 0:12` (pure). */
export function formatBar(b: BarInput): string {
  const width = b.width ?? 24;
  const frac = b.total > 0 ? Math.min(1, Math.max(0, b.done / b.total)) : 0;
  const filled = Math.floor(frac * width);
  const parts = [`${b.label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${Math.floor(frac * 100)}%`];
  const seconds = b.elapsedMs / 1000;
  const moved = b.done - (b.base ?? 0);
  if (b.unit === 'bytes' && seconds > 0) parts.push(`${(moved / 1048576 / seconds).toFixed(1)} MB/s`);
  if (frac > 0 && frac < 1 && seconds > 0 && moved > 0) parts.push(`ETA ${clock(((b.total - b.done) * seconds) / moved)}`);
  if (frac >= 1) parts.push(`done in ${clock(seconds)}`);
  return parts.join('  ');
}

export interface ProgressStream {
  readonly isTTY?: boolean;
  readonly columns?: number;
  write(s: string): unknown;
}

interface Task {
  label: string;
  unit: 'bytes' | 'percent';
  done: number;
  total: number;
  started: number;
  logged: number;
  base: number;
  drawnAt: number;
}

export class TerminalProgress {
  private readonly tasks = new Map<string, Task>();
  private drawn = false;

  constructor(
    private readonly stream: ProgressStream,
    /** Where progress goes off a terminal, and every plain line on one. */
    private readonly log: (line: string) => void,
    private readonly now: () => number = Date.now,
  ) {}

  get tty(): boolean {
    return Boolean(this.stream.isTTY);
  }

  /** A plain message: printed above the bars on a terminal, logged otherwise. */
  line(text: string): void {
    if (!this.tty) return this.log(text);
    this.clear();
    this.stream.write(`${text}\n`);
    this.draw();
  }

  update(key: string, label: string, done: number, total: number, unit: 'bytes' | 'percent'): void {
    let t = this.tasks.get(key);
    if (!t) {
      // `base`: where a resumed push started, so its rate counts only what moved since.
      t = { label, unit, done, total, started: this.now(), logged: -1, base: done, drawnAt: -Infinity };
      this.tasks.set(key, t);
    }
    Object.assign(t, { label, done, total });
    if (this.tty) {
      // At most ~10 redraws a second: a push reports every chunk.
      if (this.now() - t.drawnAt < 100 && done < total) return;
      t.drawnAt = this.now();
      return this.draw();
    }
    const decile = total > 0 ? Math.floor((10 * done) / total) : 0;
    if (decile > t.logged) {
      t.logged = decile;
      this.log(formatBar({ ...t, elapsedMs: this.now() - t.started }));
    }
  }

  /** The task ended: its last state stays on the screen (or in the log) as a finished line. */
  finish(key: string, outcome?: string): void {
    const t = this.tasks.get(key);
    if (!t) return;
    this.tasks.delete(key);
    const text = outcome ?? formatBar({ ...t, done: t.total, elapsedMs: this.now() - t.started });
    if (!this.tty) return this.log(text);
    this.clear();
    this.stream.write(`${text}\n`);
    this.draw();
  }

  private clear(): void {
    if (this.drawn) this.stream.write('\r\x1b[K');
    this.drawn = false;
  }

  private draw(): void {
    if (this.tasks.size === 0) return this.clear();
    const cols = this.stream.columns ?? 100;
    const text = [...this.tasks.values()].map((t) => formatBar({ ...t, elapsedMs: this.now() - t.started, width: 16 })).join(' | ');
    this.stream.write(`\r\x1b[K${text.length > cols - 1 ? `${text.slice(0, cols - 2)}…` : text}`);
    this.drawn = true;
  }
}

/**
 * The llama.cpp build's progress lines as a bar: cmake's `[ 45%] Building …` lines update it, anything else
 * (configuring, errors, "installed …") is a plain line.
 */
export function llamaBuildProgress(p: TerminalProgress): (line: string) => void {
  return (line) => {
    const m = /^\[\s*(\d+)%\]/.exec(line);
    if (!m) return p.line(`[llama] ${line}`);
    const pct = Number(m[1]);
    if (pct >= 100) p.finish('llama', `[llama] built (${line.replace(/^\[\s*\d+%\]\s*/, '')})`);
    else p.update('llama', '[llama] building', pct, 100, 'percent');
  };
}

/** The hub's pushes in progress as bars, polled twice a second (the push itself does not wait for a terminal). */
export function showHubPushes(p: TerminalProgress, pushes: () => Iterable<{ node: string; model: string; sha256: string; done: number; total: number }>): () => void {
  const seen = new Set<string>();
  const timer = setInterval(() => {
    const now = new Set<string>();
    for (const x of pushes()) {
      const key = `push:${x.node}:${x.sha256}`;
      now.add(key);
      seen.add(key);
      p.update(key, `push ${x.model} → ${x.node}`, x.done, x.total, 'bytes');
    }
    for (const key of [...seen]) {
      if (now.has(key)) continue;
      seen.delete(key);
      p.finish(key);
    }
  }, 500);
  timer.unref();
  return () => clearInterval(timer);
}

/** A node's incoming pushes as bars, from its agent's 'push-progress' / 'push-end' events. */
export function showNodePushes(p: TerminalProgress, agent: EventEmitter): void {
  agent.on('push-progress', (e: { sha256: string; done: number; total: number }) => p.update(`push:${e.sha256}`, `receiving ${e.sha256.slice(0, 12)}…`, e.done, e.total, 'bytes'));
  agent.on('push-end', (e: { sha256: string; ok: boolean }) => p.finish(`push:${e.sha256}`, e.ok ? undefined : `receiving ${e.sha256.slice(0, 12)}… stopped (the hub resumes or retries it)`));
}
