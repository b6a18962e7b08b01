import type { Logger } from 'pino';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import type { HubConfig } from '../config.js';
import { replicaPlacement } from '../llama/argv.js';
import type { LlamaInstall } from '../llama/install.js';
import { startLlamaServer, type RunningLlamaServer } from '../llama/processes.js';
import { describeExit } from '../llama/supervisor.js';
import type { ModelRecord } from '../store/store.js';
import { poolingFor, settingsFor } from './model-settings.js';
import type { Placement, Running } from './placement.js';
import { describeNeed } from './plan.js';

/** How long a host replica's llama-server gets to exit before it is killed. */
const HOST_STOP_GRACE_MS = 10_000;

/** llama-server's lines that say where weights and KV landed, as `<buffer type> model|KV buffer size = N MiB`. */
export function loadReport(server: RunningLlamaServer): string[] {
  return server.child
    .output()
    .filter((l) => /(model|KV) buffer size/.test(l))
    .map((l) => l.replace(/^.*?(load_tensors|llama_kv_cache\w*):\s*/, '').trim());
}

/**
 * What every llama-server the hub launches shares (host replicas and shard heads; node replicas get the same
 * values through start-replica): one place, so the KV-cache and flash-attention flags cannot drift.
 */
export function serverOptions(config: HubConfig, model: ModelRecord, p: Placement) {
  const c = settingsFor(config, model);
  return {
    model: model.path,
    ctx: p.fit.ctx,
    slots: p.fit.slots,
    cacheType: c.kvCacheType,
    flashAttn: c.flashAttn,
    alias: model.name,
    threads: c.threads,
    metrics: true,
    readyTimeoutMs: c.loadTimeoutMs,
  };
}

/** A llama-server on the hub's own machine, as the scheduler sees it. */
export function localRunning(server: RunningLlamaServer, what: string): Running {
  return {
    baseUrl: server.baseUrl,
    port: server.port,
    pid: server.child.pid ?? null,
    buffers: loadReport(server),
    exited: server.child.exited.then((info) => `${what} exited unexpectedly (${describeExit(info)})`),
    tail: () => server.child.tail(),
  };
}

/** Host replicas: one llama-server on the hub's own device. */
export class HostLauncher {
  private readonly servers = new Map<string, RunningLlamaServer>();

  constructor(private readonly deps: { config: HubConfig; install: LlamaInstall; log: Logger }) {}

  async start(p: Placement, model: ModelRecord): Promise<Running> {
    const log = this.deps.log.child({ placement: p.id, model: model.name });
    log.info({ device: p.device, need: describeNeed(model.name, p.fit) }, 'starting host replica');
    try {
      const server = await startLlamaServer(this.deps.install, {
        ...serverOptions(this.deps.config, model, p),
        name: `llama-server[${model.name}]`,
        embedding: model.embedding,
        pooling: poolingFor(model) ?? undefined,
        ...replicaPlacement(p.device, this.deps.install.backend),
      });
      this.servers.set(p.id, server);
      return localRunning(server, 'llama-server');
    } catch (err) {
      const tail = ((err as RelayError).details?.tail as string | undefined) ?? '';
      throw new RelayError(ErrorCode.REPLICA_FAILED, `could not start a replica of "${model.name}": ${(err as Error).message}`, { model: model.name, tail });
    }
  }

  async stop(p: Placement): Promise<void> {
    const server = this.servers.get(p.id);
    this.servers.delete(p.id);
    await server?.child.terminate(HOST_STOP_GRACE_MS);
  }
}
