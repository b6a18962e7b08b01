import { parentPort, Worker, workerData } from 'node:worker_threads';
import { ErrorCode, isRelayError, RelayError } from '../../shared/errors.js';

/**
 * One job in a worker thread, one answer back: how relay keeps file-sized work (parsing a GGUF it has not seen,
 * hashing gigabytes for the rpc cache) off the event loop that carries the tunnel's keep-alive and the API.
 * A RelayError thrown in the worker arrives as the same RelayError (code, message, details).
 */
type Answer = { ok: true; value: unknown } | { ok: false; code: ErrorCode; message: string; details: Record<string, unknown> };

export function runInWorker<T>(script: URL, data: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const w = new Worker(script, { workerData: data });
    let answered = false;
    w.once('message', (m: Answer) => {
      answered = true;
      if (m.ok) resolve(m.value as T);
      else reject(new RelayError(m.code, m.message, m.details));
    });
    w.once('error', (err) => reject(new RelayError(ErrorCode.INTERNAL, `worker failed: ${err.message}`, {}, { cause: err })));
    w.once('exit', (code) => {
      if (!answered) reject(new RelayError(ErrorCode.INTERNAL, `worker exited with ${code} before answering`));
    });
  });
}

/** The worker's side: run `job` on the data it was given and post the answer (or the error) once. */
export function answerFromWorker(job: (data: never) => unknown): void {
  let answer: Answer;
  try {
    answer = { ok: true, value: job(workerData as never) };
  } catch (err) {
    answer = isRelayError(err)
      ? { ok: false, code: err.code, message: err.message, details: { ...err.details } }
      : { ok: false, code: ErrorCode.IO_ERROR, message: (err as Error).message, details: {} };
  }
  parentPort!.postMessage(answer);
}
