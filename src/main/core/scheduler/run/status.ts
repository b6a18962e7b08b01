import type { HubConfig } from '../../config.js';
import type { Device } from '../../gpu/inventory.js';
import { effectiveFlashAttn } from '../../llama/argv.js';
import type { ShardInfo } from '../launch/launcher.js';
import type { Placement, PlacementStatus, ReplicaStatus, ShardStatus } from '../placements/placement.js';
import { freeAfterReservations, type Reservation } from '../decide/plan.js';
import type { ReplanStatus } from '../../../../shared/status.js';

/** How /status shows placements and devices: projections of the scheduler's table, no decisions. */

function placementStatus(p: Placement, c: HubConfig, now = Date.now()): PlacementStatus {
  return {
    id: p.id,
    model: p.model,
    state: p.state,
    port: p.running?.port ?? null,
    // A node replica's pid comes from the node's reports, from its spawn on; a local one's from the launcher.
    pid: p.running?.pid ?? p.loadingPid ?? p.node?.replicas.find((r) => r.replica === p.id)?.pid ?? null,
    ctx: p.fit.ctx,
    slots: p.fit.slots,
    in_flight: p.inFlight,
    served: p.served,
    kv_cache_type: c.kvCacheType,
    ms_per_token: p.msPerToken === null ? null : round2(p.msPerToken),
    prefix_hits: p.prefixHits,
    spec: p.spec.type,
    spec_why: p.spec.why,
    draft_tokens: p.drafted > 0 ? { drafted: p.drafted, accepted: p.draftAccepted } : null,
    prompt_ms_per_token: p.promptMsPerToken === null ? null : Math.round(p.promptMsPerToken * 1000) / 1000,
    failure: p.failure,
    load: p.state === 'starting' && p.loadingSince !== null ? { since: new Date(p.loadingSince).toISOString(), elapsed_ms: Math.max(0, now - p.loadingSince), deadline_ms: p.deadlineMs } : null,
  };
}

export function replicaStatus(p: Placement, c: HubConfig): ReplicaStatus {
  return {
    ...placementStatus(p, c),
    sha256: p.sha256,
    where: p.node ? 'node' : 'host',
    node: p.node?.name ?? null,
    device: p.device,
    flash_attn: effectiveFlashAttn(c.kvCacheType, c.flashAttn),
    need_mb: Math.ceil(p.fit.needMb),
    started_at: new Date(p.startedAt).toISOString(),
    last_used_at: new Date(p.lastUsedAt).toISOString(),
    buffers: p.running?.buffers ?? [],
  };
}

export function shardStatus(p: Placement, c: HubConfig, info: ShardInfo | null, replan: ReplanStatus | null = null): ShardStatus {
  let remote = 0;
  return {
    ...placementStatus(p, c),
    stages: (p.shardPlan?.stages ?? []).map((st, index) => {
      const m = st.node === null ? undefined : info?.members[remote++];
      return {
        index,
        node: st.node,
        device: st.device,
        layers: [st.layers[0], st.layers[1]] as [number, number],
        need_mb: Math.ceil(st.needMb),
        free_mb: Math.floor(st.freeMb),
        output: st.output,
        rpc_endpoint: m?.endpoint ?? null,
        rpc_bytes: m?.bytes ?? null,
        rpc_round_trips: m?.roundTrips ?? null,
        predicted_ms: st.predictedMs === undefined ? null : round2(st.predictedMs),
        measured_ms: p.stageMs?.[index] === undefined ? null : round2(p.stageMs[index]),
      };
    }),
    predicted_ms_per_token: p.shardPlan?.predictedMsPerToken === undefined ? null : round2(p.shardPlan.predictedMsPerToken),
    replan,
    warnings: info?.warnings ?? [],
    buffers: info?.buffers ?? [],
  };
}

/** A node's devices with what relay placed there subtracted (a CPU budget is bookkeeping the node cannot see). */
export function nodeDevicesFree<D extends { id: string; kind: 'gpu' | 'cpu'; totalMb: number; freeMb: number }>(devices: readonly D[], views: readonly Reservation[]): D[] {
  const free = freeAfterReservations(
    devices.map((d) => ({ id: d.id, kind: d.kind, totalMb: d.totalMb, reportedFreeMb: d.freeMb })),
    views,
  );
  return devices.map((d, i) => ({ ...d, freeMb: Math.floor(free[i]!.freeMb) }));
}

/** The hub's devices with what relay reserved on them. */
export function deviceStatus(devices: readonly Device[], views: readonly Reservation[]) {
  const free = freeAfterReservations(devices, views);
  return devices.map((d, i) => ({
    id: d.id,
    kind: d.kind,
    description: d.description,
    total_mb: d.totalMb,
    free_mb: Math.floor(free[i]!.freeMb),
    utilization_pct: d.utilizationPct,
    source: d.source,
    bus_id: d.busId,
  }));
}

const round2 = (x: number): number => Math.round(x * 100) / 100;
