/**
 * `relay status [--hub URL] [--json]`: the hub's /status as tables a person can read — the hub and its
 * devices, nodes and theirs, placements (replicas and shards with their stages), models, pushes, waiting
 * requests and backoffs. `statusLines` is pure: it takes the /status JSON and returns the lines.
 */

import { parseArgs } from 'node:util';
import { api, apiFailure, hubUrl } from './api.js';
import type { DeviceStatus, HubAvailabilityStatus, ModelStatus, NodeStatus, PushStatus, ReplicaStatus, ShardStatus, StageStatus, StatusDto } from '../../shared/status.js';

/**
 * What `relay status` reads of /status, picked from the DTO (a field renamed there fails to compile here). Every
 * section is optional: a hub of another version still gets the sections it sends printed.
 */
type Dev = Pick<DeviceStatus, 'id'> & Partial<Pick<DeviceStatus, 'description' | 'total_mb' | 'free_mb' | 'speed'>>;
type Row = Pick<ReplicaStatus, 'model' | 'state' | 'in_flight' | 'slots' | 'ctx' | 'ms_per_token'> & Partial<Pick<ReplicaStatus, 'load'>>;
export interface StatusView {
  readonly relay?: StatusDto['relay'];
  readonly llama_cpp?: Pick<StatusDto['llama_cpp'], 'tag' | 'backend'>;
  readonly hub?: Pick<HubAvailabilityStatus, 'availability' | 'reason'>;
  readonly devices?: readonly Dev[];
  readonly nodes?: readonly (Pick<NodeStatus, 'name' | 'state' | 'reason'> & Partial<Pick<NodeStatus, 'link'>> & { readonly devices: readonly Dev[] })[];
  readonly replicas?: readonly (Row & Pick<ReplicaStatus, 'node' | 'device'>)[];
  readonly shards?: readonly (Row & Partial<Pick<ShardStatus, 'predicted_ms_per_token' | 'replan'>> & { readonly stages: readonly Pick<StageStatus, 'node' | 'device' | 'layers'>[] })[];
  readonly models?: readonly Pick<ModelStatus, 'name' | 'size' | 'need_mb' | 'fits_now' | 'shortfall'>[];
  readonly pushes?: readonly Pick<PushStatus, 'node' | 'model' | 'done' | 'total'>[];
  readonly queues?: StatusDto['queues'];
  readonly backoffs?: readonly Pick<StatusDto['backoffs'][number], 'node' | 'model' | 'reason' | 'until'>[];
}

/** Columns padded to their widest cell; the header first. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** A placement's state; while it loads, its time so far against its deadline. */
const stateOf = (r: Row): string => {
  if (!r.load) return r.state;
  const t = (ms: number): string => (ms >= 120_000 ? `${Math.round(ms / 60_000)} min` : `${Math.round(ms / 1000)} s`);
  return `loading ${t(r.load.elapsed_ms)} of ${t(r.load.deadline_ms)}`;
};

const mem = (d: Dev): string => {
  return `${d.free_mb ?? '?'} of ${d.total_mb ?? '?'} MB free`;
};

/** A device's speed as the shard planner sees it: measured, else from its memory's bandwidth, else its kind's default. */
const speed = (d: Dev): string => {
  if (!d.speed) return '';
  const whence = d.speed.source === 'measured' ? '' : d.speed.source === 'bandwidth' ? ` (from ${d.speed.mem_gbps} GB/s)` : ' (default)';
  return `${d.speed.ms_per_gib} ms/GiB${whence}`;
};

export function statusLines(s: StatusView): string[] {
  const out: string[] = [];
  const section = (title: string, lines: string[], empty: string): void => {
    out.push('', title.toUpperCase(), ...(lines.length > 0 ? lines : [`  ${empty}`]).map((l) => (l.startsWith('  ') ? l : `  ${l}`)));
  };
  out.push(`relay ${s.relay ?? '?'} · llama.cpp ${s.llama_cpp?.tag ?? '?'} (${s.llama_cpp?.backend ?? '?'})`);
  out.push(`hub: ${s.hub?.availability ?? '?'}${s.hub?.reason ? ` (${s.hub.reason})` : ''}`);

  const devices = [
    ...(s.devices ?? []).map((d) => ['hub', d.id, d.description ?? '', mem(d), speed(d)]),
    ...(s.nodes ?? []).flatMap((n) => n.devices.map((d) => [n.name, d.id, d.description ?? '', mem(d), speed(d)])),
  ];
  const nodes = s.nodes ?? [];
  section(
    'machines',
    nodes.length > 0
      ? table(
          ['NODE', 'STATE', 'LINK', 'REASON'],
          nodes.map((n) => [n.name, n.state, n.link?.rtt_ms == null ? '' : `${n.link.rtt_ms} ms`, n.reason ?? '']),
        )
      : [],
    'no nodes joined (relay nodes token)',
  );
  section('devices', devices.length > 0 ? table(['MACHINE', 'DEVICE', 'DESCRIPTION', "MEMORY (after relay's reservations)", 'SPEED'], devices) : [], 'none');

  const placements = [
    ...(s.replicas ?? []).map((r) => [
      r.model,
      'replica',
      r.node ?? 'hub',
      r.device ?? '',
      stateOf(r),
      `${r.in_flight}/${r.slots}`,
      String(r.ctx),
      r.ms_per_token === null ? '' : r.ms_per_token.toFixed(1),
    ]),
    ...(s.shards ?? []).map((r) => [
      r.model,
      'shard',
      (r.stages ?? []).map((st) => `${st.node ?? 'hub'}:${st.device}[${st.layers[0]}-${st.layers[1]})`).join(' → '),
      '',
      stateOf(r),
      `${r.in_flight}/${r.slots}`,
      String(r.ctx),
      (r.ms_per_token === null ? '' : r.ms_per_token.toFixed(1)) + (r.predicted_ms_per_token == null ? '' : ` (predicted ${r.predicted_ms_per_token.toFixed(1)})`),
    ]),
  ];
  section(
    'placements',
    placements.length > 0 ? table(['MODEL', 'KIND', 'WHERE', 'DEVICE', 'STATE', 'IN FLIGHT', 'CTX', 'MS/TOKEN'], placements) : [],
    'none running (the first request for a model places it)',
  );
  const replans = (s.shards ?? []).filter((r) => r.replan);
  if (replans.length > 0)
    section(
      're-plans at the next cold start',
      table(
        ['MODEL', 'PLAN', 'PREDICTED MS/TOKEN', 'WHY'],
        replans.map((r) => [
          r.model,
          r.replan!.stages.map((st) => `${st.node ?? 'hub'}:${st.device}[${st.layers[0]}-${st.layers[1]})`).join(' → '),
          String(r.replan!.predicted_ms_per_token),
          r.replan!.reason,
        ]),
      ),
      '',
    );
  section(
    'models',
    (s.models ?? []).length > 0
      ? table(
          ['MODEL', 'SIZE', 'NEEDS', 'NOW'],
          (s.models ?? []).map((m) => [m.name, `${(m.size / 1048576).toFixed(1)} MB`, `${m.need_mb} MB`, m.fits_now ? 'available' : `unavailable: ${m.shortfall ?? ''}`]),
        )
      : [],
    'none registered (relay models add FILE.gguf)',
  );
  if ((s.pushes ?? []).length > 0) {
    section(
      'pushes',
      table(
        ['NODE', 'MODEL', 'PROGRESS'],
        (s.pushes ?? []).map((p) => [p.node, p.model, `${p.total ? Math.floor((100 * p.done) / p.total) : 100}% of ${(p.total / 1048576).toFixed(1)} MB`]),
      ),
      '',
    );
  }
  const waiting = (s.queues ?? []).filter((q) => q.waiting > 0);
  if (waiting.length > 0)
    section(
      'waiting requests',
      table(
        ['MODEL', 'WAITING'],
        waiting.map((q) => [q.model, String(q.waiting)]),
      ),
      '',
    );
  if ((s.backoffs ?? []).length > 0) {
    section(
      'backoffs',
      table(
        ['NODE', 'MODEL', 'UNTIL', 'WHY'],
        (s.backoffs ?? []).map((b) => [b.node, b.model, b.until, b.reason]),
      ),
      '',
    );
  }
  return out;
}

export async function cmdStatus(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { hub: { type: 'string' }, json: { type: 'boolean' } } });
  const res = await api(hubUrl(values.hub), '/status');
  const j = (await res.json()) as StatusDto & { error?: { code?: string; message?: string } };
  if (!res.ok) return apiFailure(j);
  if (values.json) console.log(JSON.stringify(j, null, 2));
  else for (const l of statusLines(j)) console.log(l);
  return 0;
}
