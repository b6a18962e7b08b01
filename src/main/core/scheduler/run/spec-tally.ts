import { chooseSpec, type SpecChoice, type SpecModel, type SpecTally, type SpecType } from '../decide/speculation.js';

/**
 * What each model's placements drafted and had accepted, per speculation type, since the hub started: what
 * `chooseSpec` judges a type by (one that does not pay is turned off at the model's next start). In memory: a
 * restarted hub measures again.
 */
export class SpecTallies {
  private readonly byModel = new Map<string, SpecTally>();

  /** Counts one answer's drafts for `model`, run with `type` (a new type starts the count afresh). */
  add(model: string, type: SpecType | null, drafted: number | null | undefined, accepted: number | null | undefined): void {
    if (!type || !drafted) return;
    const t = this.byModel.get(model);
    const base = t && t.type === type ? t : { type, drafted: 0, accepted: 0 };
    this.byModel.set(model, { type, drafted: base.drafted + drafted, accepted: base.accepted + (accepted ?? 0) });
  }

  get(model: string): SpecTally | null {
    return this.byModel.get(model) ?? null;
  }

  /** A model whose settings changed is measured afresh. */
  forget(model: string): void {
    this.byModel.delete(model);
  }

  /** The type a new placement of `m` runs with (a shard: n-grams at most). */
  choose(m: SpecModel & { readonly name: string }, shard: boolean): SpecChoice {
    return chooseSpec(m, { shard, tally: this.get(m.name) });
  }
}
