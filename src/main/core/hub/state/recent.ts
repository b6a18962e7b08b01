/** The last few of something (requests through /v1, moved answers), newest first, for the dashboard. */
export class Recent<T> {
  readonly list: T[] = [];
  constructor(private readonly max = 20) {}
  add(r: T): void {
    this.list.unshift(r);
    if (this.list.length > this.max) this.list.pop();
  }
}
