/** The worker thread of readModelInfoOffThread: parse one GGUF header, answer its ModelInfo. */
import { answerFromWorker } from '../worker.js';
import { readModelInfo } from './derive.js';

answerFromWorker((job: { path: string }) => readModelInfo(job.path));
