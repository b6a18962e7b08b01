/**
 * The worker thread of the gguf module's off-thread reads: a model's GGUF header(s) parsed into its ModelFiles
 * (readModelFilesOffThread), or into its card (readModelCardOffThread).
 */
import { answerFromWorker } from '../worker.js';
import { readModelCard } from './card.js';
import { readModelFiles } from './split.js';

answerFromWorker((job: { path: string } | { card: string[]; maxArray: number }) => ('card' in job ? readModelCard(job.card, job.maxArray) : readModelFiles(job.path)));
