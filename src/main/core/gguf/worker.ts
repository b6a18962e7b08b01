/** The worker thread of readModelFilesOffThread: parse a model's GGUF header(s) (every part of a split one), answer its ModelFiles. */
import { answerFromWorker } from '../worker.js';
import { readModelFiles } from './split.js';

answerFromWorker((job: { path: string }) => readModelFiles(job.path));
