/** The worker thread of fillRpcCacheInWorker: one fill, one message back. */
import { parentPort, workerData } from 'node:worker_threads';
import { ErrorCode, isRelayError } from '../../../shared/errors.js';
import { fillRpcCache } from './rpc-cache.js';

const d = workerData as { ggufPath: string; sha256: string; dir: string; layers: [number, number] | null };
try {
  parentPort!.postMessage({ ok: true, index: fillRpcCache(d.ggufPath, d.sha256, d.dir, d.layers) });
} catch (err) {
  parentPort!.postMessage({ ok: false, code: isRelayError(err) ? err.code : ErrorCode.IO_ERROR, message: (err as Error).message });
}
