/** The worker thread of the rpc cache's tensor work (rpc-tensors.ts): list a stage's tensors, write, name or check their files. */
import { answerFromWorker } from '../worker.js';
import { nameTensorSpans, tensorSpans, wholeFiles, writeTensorFiles, type TensorSpan, type WeightFile } from './rpc-tensors.js';

type Job =
  | { op: 'spans'; ggufPath: string; layers: [number, number] | null }
  | { op: 'write'; ggufPath: string; spans: TensorSpan[]; dir: string }
  | { op: 'name'; ggufPath: string; spans: TensorSpan[] }
  | { op: 'whole'; dir: string; files: WeightFile[] };

answerFromWorker((job: Job) => {
  switch (job.op) {
    case 'spans':
      return tensorSpans(job.ggufPath, job.layers);
    case 'write':
      return writeTensorFiles(job.ggufPath, job.spans, job.dir);
    case 'name':
      return nameTensorSpans(job.ggufPath, job.spans);
    case 'whole':
      return wholeFiles(job.dir, job.files);
  }
});
