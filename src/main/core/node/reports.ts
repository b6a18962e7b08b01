import { PROTOCOL_VERSION, type Availability, type DeviceInfo, type Heartbeat, type Hello } from '../../../shared/protocol.js';
import { packageVersion } from '../app-files.js';
import type { Device } from '../gpu/inventory.js';
import type { ModelCache } from './cache/cache.js';
import type { Workloads } from './work/workloads.js';

/**
 * What a node tells the hub about itself: the hello that opens a session and the heartbeat every few seconds
 * (and at once when something exits). Both carry what runs here — replicas (loading ones too) and rpc-servers —
 * so the hub's reconciliation can stop what it no longer expects.
 */
export interface ReportSource {
  readonly name: string;
  readonly schedule: string;
  readonly work: Workloads;
  readonly cache: ModelCache;
  devices(): DeviceInfo[];
  availability(): { state: Availability; reason: string | null };
}

/** A device as the hub hears of it: free memory dated by its age, and its memory's bandwidth where the driver told it. */
export function deviceInfo(d: Device, now: number): DeviceInfo {
  const { id, kind, description, totalMb } = d;
  return { id, kind, description, totalMb, freeMb: d.reportedFreeMb, ageMs: Math.max(0, now - d.readAt), ...(d.memGBps ? { memGBps: d.memGBps } : {}) };
}

export function heartbeatOf(s: ReportSource): Heartbeat {
  const a = s.availability();
  return {
    type: 'heartbeat',
    devices: s.devices(),
    availability: a.state,
    reason: a.reason,
    replicas: s.work.reported(),
    rpcs: s.work.reportedRpcs(),
    cache: s.cache.inventory(),
    schedule: s.schedule,
  };
}

export function helloOf(s: ReportSource, llama: string, relay: string = packageVersion()): Hello {
  const { type: _type, ...rest } = heartbeatOf(s);
  return { type: 'hello', protocol: PROTOCOL_VERSION, node: s.name, llama, relay, partials: s.cache.partials(), ...rest };
}
