/**
 * The performance targets (issue #13) as one table: each benchmark reports the figures it measured, and
 * `npm run bench` prints them together at the end, each beside its target and whether this run met it.
 */
export interface TargetRow {
  readonly figure: string;
  /** The measured figure as printed (a ratio, a time, a size). */
  readonly shown: string;
  readonly target: string;
  readonly met: boolean;
}

const rows: TargetRow[] = [];

export function reportTarget(figure: string, shown: string, target: string, met: boolean): void {
  rows.push({ figure, shown, target, met });
}

/** A ratio that should be at least `min`. */
export function reportRatio(figure: string, ratio: number, min: number): void {
  reportTarget(figure, ratio.toFixed(3), `≥ ${min}`, ratio >= min);
}

export function targetTable(): string[] {
  if (rows.length === 0) return [];
  return ['| figure | this run | target | met |', '| --- | --- | --- | --- |', ...rows.map((r) => `| ${r.figure} | ${r.shown} | ${r.target} | ${r.met ? 'yes' : '**no**'} |`)];
}
