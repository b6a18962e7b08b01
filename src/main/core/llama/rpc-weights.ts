import { availableParallelism } from 'node:os';
import { runInWorker } from '../worker.js';
import { workerUrl } from '../app-files.js';
import { shareOut, type TensorSpan, type WeightFile } from './rpc-tensors.js';

const WORKER = workerUrl('rpc-tensors');

/** How many models' stages are remembered (each a few dozen names). */
const KEEP = 32;

/**
 * The weight files a shard stage's load leaves in a node's rpc cache (rpc-tensors.ts), named by the hub from its own
 * copy of the model: each tensor over 10 MiB of the stage's layers, hashed as the head hashes it, in worker threads
 * (the head reads the same bytes to send them). What the node may keep as that stage's weights, and nothing else.
 * Remembered per file and layers.
 */
export class StageWeights {
  private readonly known = new Map<string, Promise<WeightFile[]>>();

  of(files: readonly { readonly path: string; readonly sha256: string }[], layers: readonly [number, number]): Promise<WeightFile[]> {
    const key = `${files.map((f) => f.sha256).join('+')}:${layers[0]}-${layers[1]}`;
    let p = this.known.get(key);
    if (!p) {
      p = Promise.all(files.map((f) => name(f.path, layers))).then((parts) => parts.flat());
      p.catch(() => this.known.delete(key));
      this.known.set(key, p);
      while (this.known.size > KEEP) this.known.delete(this.known.keys().next().value!);
    }
    return p;
  }
}

async function name(path: string, layers: readonly [number, number], threads = Math.min(availableParallelism(), 4)): Promise<WeightFile[]> {
  const spans = await runInWorker<TensorSpan[]>(WORKER, { op: 'spans', ggufPath: path, layers: [layers[0], layers[1]] });
  const parts = await Promise.all(shareOut(spans, threads).map((part) => (part.length > 0 ? runInWorker<WeightFile[]>(WORKER, { op: 'name', ggufPath: path, spans: part }) : Promise.resolve([]))));
  return parts.flat();
}
