import { runInWorker } from '../worker.js';
import type { ModelFiles } from './split.js';

const WORKER = new URL('./worker.js', import.meta.url);

/**
 * readModelFiles in a worker thread: a GGUF the hub has not seen (a user's path, possibly hostile, its header up
 * to the reader's limits; every part of a split model) is parsed without stalling the hub's API and tunnels.
 * Errors keep their codes.
 */
export function readModelFilesOffThread(path: string): Promise<ModelFiles> {
  return runInWorker<ModelFiles>(WORKER, { path });
}
