import type { DeviceInfo } from '../../../shared/protocol.js';
import type { LinkStatus, NodeDeviceStatus, NodeStatus } from '../../../shared/status.js';
import type { NodeRecord } from '../store/store.js';
import type { NodeConn } from './conn.js';

/** A node's DeviceInfo (the protocol's camelCase) as /status and /api/nodes show it (snake_case). */
export function nodeDeviceStatus(d: DeviceInfo): NodeDeviceStatus {
  return { id: d.id, kind: d.kind, description: d.description, total_mb: d.totalMb, free_mb: d.freeMb, age_ms: d.ageMs ?? null };
}

/**
 * One node as /status shows it: its record (with the refusal of its last hello, if it was refused for its version:
 * `reason` then says who should update) and its connection (absent: never connected since the hub started).
 */
export function nodeStatus(r: NodeRecord, c: NodeConn | undefined): NodeStatus {
  const alive = Boolean(c?.alive);
  const refused = alive ? undefined : r.refused;
  return {
    name: r.name,
    state: r.revoked_at ? 'revoked' : alive ? c!.availability : 'offline',
    reason: alive ? c!.reason : (refused?.summary ?? c?.reason ?? null),
    schedule: c?.schedule ?? null,
    connected: alive,
    devices: (c?.devices ?? []).map(nodeDeviceStatus),
    cache: c ? [...c.cache].map(([sha256, size]) => ({ sha256, size })) : [],
    replicas: c?.replicas ?? [],
    rpcs: c?.rpcs ?? [],
    last_seen: c ? new Date(c.lastSeen).toISOString() : r.last_seen,
    created_at: r.created_at,
    revoked_at: r.revoked_at,
    bytes: c?.bytes ?? null,
    link: alive ? linkStatus(c!.link()) : null,
    relay_version: c?.relay ?? refused?.node_relay ?? null,
    refused: refused ? { code: refused.code, update: refused.update, message: refused.message, node_relay: refused.node_relay, hub_relay: refused.hub_relay, at: refused.at } : null,
  };
}

/** A link's measures as /status shows them (bytes per second, whole ms to the tenth). */
export function linkStatus(l: { rttMs: number | null; bytesPerMs: number | null }): LinkStatus {
  return { rtt_ms: l.rttMs === null ? null : Math.round(l.rttMs * 10) / 10, bytes_per_s: l.bytesPerMs === null ? null : Math.round(l.bytesPerMs * 1000) };
}
