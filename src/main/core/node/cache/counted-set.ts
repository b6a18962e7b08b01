/** A set in which each add needs its own delete: two fills from one file keep it protected until both end. */
export class CountedSet {
  private readonly counts = new Map<string, number>();
  /** When the set last went from empty to not (Date.now()); null while empty. */
  since: number | null = null;

  add(key: string): void {
    if (this.counts.size === 0) this.since = Date.now();
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }
  delete(key: string): void {
    const n = (this.counts.get(key) ?? 0) - 1;
    if (n > 0) this.counts.set(key, n);
    else this.counts.delete(key);
    if (this.counts.size === 0) this.since = null;
  }
  has(key: string): boolean {
    return this.counts.has(key);
  }
}
