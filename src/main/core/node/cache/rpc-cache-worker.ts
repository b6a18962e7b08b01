/** The worker thread of fillRpcCacheOffThread: parse a GGUF into a fill plan, or write a share of its tensors. */
import { answerFromWorker } from '../../worker.js';
import { planRpcFill, writeTensorFiles, type TensorSpan } from './rpc-cache.js';

type Job = { op: 'plan'; ggufPath: string; sha256: string; dir: string; layers: [number, number] | null } | { op: 'write'; ggufPath: string; spans: TensorSpan[]; dir: string };

answerFromWorker((job: Job) => (job.op === 'plan' ? planRpcFill(job.ggufPath, job.sha256, job.dir, job.layers) : writeTensorFiles(job.ggufPath, job.spans, job.dir)));
