import { readVocabOffThread } from './off-thread.js';
import { piecesOf, type Pieces } from './pieces.js';

/**
 * The pieces (pieces.ts) of the models a hub serves, each read once off the event loop when first wanted (a
 * vocabulary of 150,000 tokens takes a moment), a few at a time: keyed by the file's sha256, so a changed file is
 * read again.
 */
const KEEP = 4;

export class PieceCache {
  private readonly byFile = new Map<string, Promise<Pieces | null>>();

  get(m: { readonly path: string; readonly sha256: string }): Promise<Pieces | null> {
    let p = this.byFile.get(m.sha256);
    if (!p) {
      p = readVocabOffThread(m.path).then(piecesOf, () => null);
      this.byFile.set(m.sha256, p);
      while (this.byFile.size > KEEP) this.byFile.delete(this.byFile.keys().next().value!);
    }
    return p;
  }
}
