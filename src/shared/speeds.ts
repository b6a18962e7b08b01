/**
 * What relay measured of its devices and links, as /status shows it (scheduler/decide/speed.ts keeps the numbers,
 * the shard planner predicts from them).
 */

/** A device's speed: what the shard planner predicts a stage's time from. */
export interface DeviceSpeedStatus {
  /** ms per GiB of layer weights per generated token: measured here, else from its memory's bandwidth (NVML), else the default for its kind. */
  readonly ms_per_gib: number;
  readonly source: 'measured' | 'bandwidth' | 'default';
  /** The memory bandwidth (GB/s) a `bandwidth` figure comes from. */
  readonly mem_gbps?: number;
  readonly samples: number;
  /** ms per layer per generated token, by model, where this device ran it. */
  readonly per_layer_ms: Readonly<Record<string, number>>;
  readonly measured_at: string | null;
}

/** A node's link as the tunnel measured it: the least ping round trip, the rate its pushes were read at. */
export interface LinkStatus {
  readonly rtt_ms: number | null;
  readonly bytes_per_s: number | null;
}

/** A shard whose measured speed is off its prediction: the plan its next cold start takes. */
export interface ReplanStatus {
  readonly reason: string;
  readonly predicted_ms_per_token: number;
  readonly stages: readonly { readonly node: string | null; readonly device: string; readonly layers: readonly [number, number] }[];
}
