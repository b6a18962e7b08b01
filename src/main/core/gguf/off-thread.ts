import { runInWorker } from '../worker.js';
import { workerUrl } from '../app-files.js';
import type { ModelCard } from './card.js';
import type { ModelFiles } from './split.js';
import type { Vocab } from './vocab.js';

const WORKER = workerUrl('gguf');

/**
 * readModelFiles in a worker thread: a GGUF the hub has not seen (a user's path, possibly hostile, its header up
 * to the reader's limits; every part of a split model) is parsed without stalling the hub's API and tunnels.
 * Errors keep their codes.
 */
export function readModelFilesOffThread(path: string): Promise<ModelFiles> {
  return runInWorker<ModelFiles>(WORKER, { path });
}

/** A GGUF's tokenizer (vocab.ts) read in a worker thread: two of 150,000 tokens compared at `set` stall nothing. */
export function readVocabOffThread(path: string): Promise<Vocab> {
  return runInWorker<Vocab>(WORKER, { vocab: path });
}

/** readModelCard in a worker thread (a vocabulary of 150,000 tokens is read without stalling the hub). */
export function readModelCardOffThread(paths: readonly string[], maxArray: number): Promise<ModelCard> {
  return runInWorker<ModelCard>(WORKER, { card: [...paths], maxArray });
}
