import type { Logger } from 'pino';
import { ErrorCode, RelayError, isRelayError } from '../../../../shared/errors.js';
import type { HubConfig } from '../../config.js';
import { draftPlacement, projectorPlacement, replicaPlacement } from '../../llama/argv.js';
import type { LlamaInstall } from '../../llama/install.js';
import { startLlamaServer, type RunningLlamaServer } from '../../llama/processes.js';
import { describeExit, type ManagedChild } from '../../llama/supervisor.js';
import { liveness, type Liveness } from '../../llama/liveness.js';
import type { ModelRecord } from '../../store/store.js';
import { poolingFor, settingsFor } from '../decide/model-settings.js';
import type { Placement, Running } from '../placements/placement.js';
import { describeNeed } from '../decide/plan.js';
import { SlotKeeper, type SlotLayout } from '../slots/slot-keep.js';
import { slotTokens, type AnswerRecords, type SlotTokens } from '../slots/answer-records.js';
import { idleSlotTokens } from '../../llama/slot-state.js';
import { START_RESTORE_WAIT_MS, TAKE_IN_WAIT_MS } from '../slots/slot-carry.js';
import type { KeptSlots } from '../slots/slot-keep.js';
import { KV_ROW_SCALE } from '../decide/fit.js';

/** How long a host replica's llama-server gets to exit before it is killed. */
const HOST_STOP_GRACE_MS = 10_000;

/**
 * llama-server's load report: where weights, caches and compute buffers landed (`<buffer type> model|KV|RS|compute
 * buffer size = N MiB`) and what `--flash-attn auto` resolved to ("Flash Attention enabled" or "… not supported,
 * set to disabled": the fit reads it, placer.ts).
 */
export function loadReport(server: RunningLlamaServer): string[] {
  return server.child
    .output()
    .filter((l) => /(model|KV|RS|compute) buffer size|Flash Attention (enabled|not supported)/.test(l))
    .map((l) => l.replace(/^.*?(load_tensors|llama_kv_cache\w*|llama_memory_recurrent|sched_reserve|resolve_fused_ops):\s*/, '').trim());
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
    nPredict: model.settings?.max_tokens,
    // Speculation without a draft model (n-grams, next-token heads); a draft model comes with draftPlacement.
    spec: p.spec.type === 'draft-simple' ? undefined : (p.spec.type ?? undefined),
    metrics: true,
    readyTimeoutMs: p.deadlineMs,
  };
}

/** A launch error as the scheduler takes it: a deadline overrun keeps its code (it counts against the machine). */
export function launchError(err: unknown, message: string, details: Record<string, unknown>): RelayError {
  const tail = ((err as RelayError).details?.tail as string | undefined) ?? '';
  const code = isRelayError(err, ErrorCode.LOAD_TIMEOUT) ? ErrorCode.LOAD_TIMEOUT : ErrorCode.REPLICA_FAILED;
  return new RelayError(code, `${message}: ${(err as Error).message}`, { ...details, tail });
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

/**
 * Host replicas: one llama-server on the hub's own device. The process is held from the moment it is spawned:
 * a stop while it still loads (a pause, an eviction, a settings change) kills it and resolves only once it has
 * exited, so the scheduler keeps its reservation until the device is really free.
 */
interface Held {
  child: ManagedChild | null;
  url: string | null;
  stopped: boolean;
  settled: Promise<unknown>;
  readonly model: ModelRecord;
}

/**
 * What a kept slot must match to be restored (slot-keep.ts), for `model` placed as `p`. Null for what keeps no
 * slots: keeping is off, a model with a draft (its KV is not saved), or a vision model (llama-server answers 501
 * with --mmproj).
 */
export function slotLayout(slots: SlotKeeper, config: HubConfig, model: ModelRecord, p: Placement): SlotLayout | null {
  if (!slots.enabled || model.draft || model.mmproj || p.spec.type === 'draft-mtp') return null;
  const cacheType = settingsFor(config, model).kvCacheType;
  // Every layer's KV a token takes (sliding layers keep at most a window of it: an upper bound) at the cache's block size.
  const perToken = model.memory ? model.memory.layers.reduce((s, l) => s + (l.k + l.v) * 2, 0) : model.kv_bytes_per_token;
  const bytesPerToken = perToken === null ? null : perToken * KV_ROW_SCALE[cacheType];
  const stateBytes = model.memory ? model.memory.layers.reduce((s, l) => s + l.state * 4, 0) : 0;
  return { sha256: model.sha256, ctx: p.fit.ctx, slots: p.fit.slots, cacheType, bytesPerToken, stateBytes };
}

export class HostLauncher {
  private readonly servers = new Map<string, Held>();
  /** The slots of idle replicas, kept for the next start of their model. */
  readonly slots: SlotKeeper;

  constructor(private readonly deps: { config: HubConfig; install: LlamaInstall; log: Logger; slots: SlotKeeper; records: AnswerRecords }) {
    this.slots = deps.slots;
  }

  private layout(model: ModelRecord, p: Placement): SlotLayout | null {
    return slotLayout(this.slots, this.deps.config, model, p);
  }

  start(p: Placement, model: ModelRecord): Promise<Running> {
    const log = this.deps.log.child({ placement: p.id, model: model.name });
    log.info({ device: p.device, need: describeNeed(model.name, p.fit), deadline_s: Math.round(p.deadlineMs / 1000) }, 'starting host replica');
    const held: Held = { child: null, url: null, stopped: false, settled: Promise.resolve(), model };
    const layout = this.layout(model, p);
    this.servers.set(p.id, held);
    const started = (async (): Promise<Running> => {
      try {
        const server = await startLlamaServer(this.deps.install, {
          ...serverOptions(this.deps.config, model, p),
          name: `llama-server[${model.name}]`,
          embedding: model.embedding,
          reranking: model.reranker ?? false,
          pooling: poolingFor(model) ?? undefined,
          // A vision model's projector beside it, on its device (kept on the CPU with a CPU placement).
          ...projectorPlacement(model.mmproj?.path, p.device),
          // Its draft model (speculative decoding) on the same device.
          ...draftPlacement(p.spec.type === 'draft-simple' ? (model.draft ?? null) : null, p.device, this.deps.install.backend),
          ...replicaPlacement(p.device, this.deps.install.backend),
          slotSavePath: layout ? this.slots.savePath : undefined,
          onSpawn: (child) => {
            held.child = child;
            p.loadingSince = Date.now();
            p.loadingPid = child.pid ?? null;
            if (held.stopped) void child.terminate(HOST_STOP_GRACE_MS); // stopped before it even spawned
          },
        });
        held.url = server.baseUrl;
        // The conversations the model's last replica held, read back before the first request.
        const restored = layout ? await this.slots.restore(model.name, layout, server.baseUrl, START_RESTORE_WAIT_MS) : null;
        // Running, with one slot: an answer that moves here takes its kept state in (its lease holds that slot).
        const takeIn = layout?.slots === 1 ? (from: string) => this.slots.restore(model.name, layout, server.baseUrl, TAKE_IN_WAIT_MS, from) : undefined;
        return { ...localRunning(server, 'llama-server'), restored, ...(takeIn ? { takeIn } : {}) };
      } catch (err) {
        throw launchError(err, `could not start a replica of "${model.name}"`, { model: model.name });
      }
    })();
    held.settled = started.catch(() => undefined);
    return started;
  }

  check(p: Placement): Promise<Liveness> {
    const held = this.servers.get(p.id);
    return liveness(held?.child ?? null, held?.url ? `${held.url}/health` : null);
  }

  /** Its idle slots' tokens into its record (an answer just yielded one of them; see Launcher.recordSlots). */
  recordSlots(p: Placement): Promise<void> {
    const held = this.servers.get(p.id);
    if (!held?.url || !this.layout(held.model, p)) return Promise.resolve();
    const tokens = idleSlotTokens(held.url, this.slots.dir, `yield-${p.id}`, p.leases.size);
    this.deps.records.expect(p.id, tokens);
    return tokens.then(() => undefined);
  }

  /** Save the replica's slots for the model's next replica while it runs (and serves); see Launcher.keep. */
  async keep(p: Placement): Promise<KeptSlots | null> {
    const held = this.servers.get(p.id);
    const layout = held?.url ? this.layout(held.model, p) : null;
    if (!held?.url || !layout) return null;
    const name = held.model.name;
    return (await this.slots.save(name, p.id, layout, held.url)) ? { discard: () => this.slots.drop(name, p.id) } : null;
  }

  /**
   * Stops the replica, loading or ready; resolves once its process has exited. With `save`, its slots are saved
   * first: their KV is kept for the model's next replica (a pause between two turns costs the conversation nothing),
   * and their token lists are the record the answers that moved off it continue from (answer-records.ts). `kept`
   * says whether they were.
   */
  async stop(p: Placement, save = false): Promise<{ readonly kept: Promise<boolean> } | void> {
    const held = this.servers.get(p.id);
    if (!held) return;
    this.servers.delete(p.id);
    const layout = save && held.url ? this.layout(held.model, p) : null;
    let kept = false;
    if (layout && held.url) {
      const tokens: SlotTokens[] = [];
      const saved = this.slots.save(held.model.name, p.id, layout, held.url, async (files) => void tokens.push(...(await slotTokens(this.slots, files))));
      // A placement the answers moved to may be taking them in already: it waits for this state.
      this.slots.expect(held.model.name, saved);
      this.deps.records.expect(
        p.id,
        saved.then(() => tokens),
      );
      kept = await saved;
    }
    held.stopped = true;
    if (held.child) this.deps.log.info({ placement: p.id, exit: describeExit(await held.child.terminate(HOST_STOP_GRACE_MS)) }, 'host replica stopped');
    else await held.settled; // not spawned yet: onSpawn kills it, and a failed start settles once it has exited
    await held.child?.exited;
    return { kept: Promise.resolve(kept) };
  }
}
