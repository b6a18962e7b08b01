import { runInWorker } from '../worker.js';
import type { ModelInfo } from './derive.js';

const WORKER = new URL('./worker.js', import.meta.url);

/**
 * readModelInfo in a worker thread: a GGUF the hub has not seen (a user's path, possibly hostile, its header up
 * to the reader's limits) is parsed without stalling the hub's API and tunnels. Errors keep their codes.
 */
export function readModelInfoOffThread(path: string): Promise<ModelInfo> {
  return runInWorker<ModelInfo>(WORKER, { path });
}
