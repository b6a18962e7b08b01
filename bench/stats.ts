/** The statistics the benches share. */

/** The middle value of `xs` (the mean of the two middle ones when their count is even). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** The `p`th percentile of `xs`: the value at rank ⌊p% of their count⌋ (the largest at most). */
export function percentile(xs: readonly number[], p: number): number {
  return [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
}
