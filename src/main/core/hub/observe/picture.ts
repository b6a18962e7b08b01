import type { DeviceSpeedStatus, PictureDevice, PictureMachine, PictureSegment, PlacementStatus, StatusDto } from '../../../../shared/status.js';
import { HUB } from '../../scheduler/decide/backoff.js';

type Parts = Pick<StatusDto, 'hub' | 'devices' | 'nodes' | 'replicas' | 'shards' | 'backoffs' | 'pushes'>;

const tps = (p: PlacementStatus): number | null => (p.ms_per_token ? Math.round(10_000 / p.ms_per_token) / 10 : null);

function segment(p: PlacementStatus, mb: number, stage: PictureSegment['stage']): PictureSegment {
  return { placement: p.id, model: p.model, kind: stage ? 'stage' : 'replica', stage, state: p.state, mb, in_flight: p.in_flight, slots: p.slots, tokens_per_second: tps(p), load: p.load };
}

/** Every placement's share of a device, keyed `machine/device` (machine: HUB or a node's name). */
function segmentsByDevice(s: Parts): Map<string, PictureSegment[]> {
  const out = new Map<string, PictureSegment[]>();
  const put = (machine: string | null, device: string, seg: PictureSegment): void => {
    const k = `${machine ?? HUB}/${device}`;
    out.set(k, [...(out.get(k) ?? []), seg]);
  };
  for (const r of s.replicas) put(r.node, r.device, segment(r, r.need_mb, null));
  for (const sh of s.shards) {
    const order = [...sh.stages].sort((a, b) => a.index - b.index);
    order.forEach((st, i) => put(st.node, st.device, segment(sh, st.need_mb, { index: i + 1, of: order.length, layers: st.layers, output: st.output })));
  }
  return out;
}

function device(d: { id: string; kind: 'gpu' | 'cpu'; description: string; total_mb: number; free_mb: number; speed?: DeviceSpeedStatus }, segments: readonly PictureSegment[]): PictureDevice {
  const used = Math.max(0, d.total_mb - d.free_mb);
  const mine = segments.reduce((a, x) => a + x.mb, 0);
  return { id: d.id, kind: d.kind, description: d.description, total_mb: d.total_mb, free_mb: d.free_mb, other_mb: Math.max(0, Math.round(used - mine)), segments, speed: d.speed ?? null };
}

/**
 * The pool at a glance (the dashboard's picture): the hub, then each node that has not been revoked, each with
 * its devices split into relay's placements (a shard appears once per stage, numbered in execution order),
 * other programs' use and free room, plus the backoffs and pushes that concern it. Pure: built from the other
 * fields of /status, so the picture never says anything the tables do not.
 */
export function poolPicture(s: Parts): PictureMachine[] {
  const segs = segmentsByDevice(s);
  const on = (machine: string) => ({
    backoffs: s.backoffs.filter((b) => b.node === machine).map((b) => ({ model: b.model, reason: b.reason, until: b.until })),
    pushes: s.pushes.filter((p) => p.node === machine).map((p) => ({ model: p.model, done: p.done, total: p.total })),
  });
  const hub: PictureMachine = {
    name: HUB,
    role: 'hub',
    state: s.hub.availability,
    reason: s.hub.reason,
    devices: s.devices.map((d) => device(d, segs.get(`${HUB}/${d.id}`) ?? [])),
    link: null,
    ...on(HUB),
  };
  const nodes = s.nodes
    .filter((n) => n.state !== 'revoked')
    .map((n): PictureMachine => ({
      name: n.name,
      role: 'node',
      state: n.state,
      reason: n.reason,
      devices: n.connected ? n.devices.map((d) => device(d, segs.get(`${n.name}/${d.id}`) ?? [])) : [],
      link: n.link ?? null,
      ...on(n.name),
    }));
  return [hub, ...nodes];
}
