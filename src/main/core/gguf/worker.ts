/**
 * The worker thread of the gguf module's off-thread reads: a model's GGUF header(s) parsed into its ModelFiles
 * (readModelFilesOffThread), into its card (readModelCardOffThread), or its tokenizer (readVocabOffThread).
 */
import { answerFromWorker } from '../worker.js';
import { readModelCard } from './card.js';
import { readModelFiles } from './split.js';
import { readVocab } from './vocab.js';

answerFromWorker((job: { path: string } | { card: string[]; maxArray: number } | { vocab: string }) =>
  'card' in job ? readModelCard(job.card, job.maxArray) : 'vocab' in job ? readVocab(job.vocab) : readModelFiles(job.path),
);
