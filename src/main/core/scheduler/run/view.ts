import type { HubConfig } from '../../config.js';
import type { Device } from '../../gpu/inventory.js';
import type { ModelRegistry } from '../../models/registry.js';
import type { FailureMemory } from '../decide/backoff.js';
import type { Launcher } from '../launch/launcher.js';
import { machinesOf, type Placement } from '../placements/placement.js';
import type { Placer } from './placer.js';
import type { WaitQueue } from '../placements/queue.js';
import { deviceStatus, nodeDevicesFree, replicaStatus, shardStatus } from './status.js';
import { settingsFor } from '../decide/model-settings.js';
import { HUB } from '../decide/backoff.js';

/**
 * What the scheduler's table looks like from outside (/status, the dashboard, the tray, auto-pause): reads
 * only, no decisions. The maps are the scheduler's own, shared by reference.
 */
export class PoolView {
  constructor(
    private readonly s: {
      readonly config: HubConfig;
      readonly registry: ModelRegistry;
      readonly launcher: Launcher;
      readonly devices: () => Device[];
      readonly placements: ReadonlyMap<string, Placement>;
      readonly failed: ReadonlyMap<string, Placement>;
      readonly failures: FailureMemory;
      readonly waiting: WaitQueue;
      readonly placer: Placer;
    },
  ) {}

  /** Requests in flight on placements that use the hub's devices (its busy vs idle). */
  hubStreams(): number {
    return [...this.s.placements.values()].filter((p) => machinesOf(p).includes(null)).reduce((n, p) => n + p.inFlight, 0);
  }

  /** Backoffs in force (for /status and the dashboard); the hub itself is named "hub". */
  backoffs(): { node: string; model: string; failures: number; reason: string; since: string; until: string }[] {
    return this.s.failures.active().map((b) => ({
      node: b.node,
      model: b.model,
      failures: b.failures,
      reason: b.reason,
      since: new Date(b.at).toISOString(),
      until: new Date(b.until).toISOString(),
    }));
  }

  /** Requests waiting for a slot, per model (for /status). */
  queues(): { model: string; waiting: number }[] {
    return this.s.waiting.counts();
  }

  private all(): Placement[] {
    return [...this.s.placements.values(), ...this.s.failed.values()];
  }

  status() {
    return this.all()
      .filter((p) => p.kind !== 'shard')
      .map((p) => replicaStatus(p, settingsFor(this.s.config, this.s.registry.get(p.model))));
  }

  shardStatus() {
    return this.all()
      .filter((p) => p.kind === 'shard')
      .map((p) => {
        const model = this.s.registry.get(p.model);
        return shardStatus(p, settingsFor(this.s.config, model), this.s.launcher.shardInfo(p), model ? this.s.placer.replan(model, p) : null);
      });
  }

  nodeDevicesFree(node: string, devices: readonly { id: string; kind: 'gpu' | 'cpu'; description: string; totalMb: number; freeMb: number; memGBps?: number }[]) {
    return nodeDevicesFree(devices, this.s.placer.views(node)).map((d) => ({ ...d, speed: this.s.placer.speeds.status(node, d.id, d) }));
  }

  /** The placements ready now, for Ollama's /api/ps: what each holds, its context, its last use, whether only CPUs run it. */
  ready(): { model: string; needMb: number; ctx: number; lastUsedAt: number; inFlight: number; onCpu: boolean }[] {
    return [...this.s.placements.values()]
      .filter((p) => p.state === 'ready')
      .map((p) => ({
        model: p.model,
        needMb: p.fit.needMb,
        ctx: p.fit.ctx,
        lastUsedAt: p.lastUsedAt,
        inFlight: p.inFlight,
        // 'CPU': the inventory's id for a machine's opted-in CPU budget (gpu/inventory.ts).
        onCpu: p.shardPlan ? p.shardPlan.stages.every((st) => st.device === 'CPU') : p.device === 'CPU',
      }));
  }

  deviceStatus() {
    const devices = this.s.devices();
    return deviceStatus(devices, this.s.placer.views(null)).map((d, i) => ({ ...d, speed: this.s.placer.speeds.status(HUB, d.id, devices[i]!) }));
  }
}
