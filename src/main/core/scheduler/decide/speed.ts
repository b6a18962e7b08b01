/**
 * How fast each device runs a model's layers and what each node's link costs a token, pure: measurements in,
 * estimates out. The shard planner predicts a pipeline's time per token from these (shard.ts); run/speeds.ts
 * keeps them per machine and feeds them.
 *
 * A device's speed is kept two ways: per model, as ms per layer (what its placements of that model measured),
 * and across models, as ms per GiB of layer weights read (a token's generation reads every weight once, so on
 * one device the time per token follows the bytes). A model never run on a device is predicted from the second;
 * a device never measured from its memory's bandwidth where the driver tells it (an NVIDIA GPU through NVML:
 * bandwidthMsPerGib), else from a default by its kind (DEFAULT_MS_PER_GIB).
 */

/** ms per GiB of weights per generated token on a device never measured: a mid-range GPU (~300 GB/s) and a desktop's RAM (~25 GB/s). */
export const DEFAULT_MS_PER_GIB = { gpu: 4, cpu: 40 } as const;
/**
 * The share of a GPU's peak memory bandwidth llama.cpp's token generation reads weights at (~70–80% on
 * NVIDIA cards), for a device never measured whose bandwidth the driver gives.
 */
export const BANDWIDTH_SHARE = 0.75;
/** Each new measurement's weight in the running estimate (older ones decay). */
export const SPEED_DECAY = 0.3;
/** A node's link before its first ping or push: 1 ms, 100 Mbit/s. */
export const DEFAULT_LINK = { rttMs: 1, bytesPerMs: 12_500 } as const;
/** A shard whose measured ms/token differs from its plan's prediction by more than this share is re-planned at its next cold start. */
export const REPLAN_THRESHOLD = 0.25;

export type DeviceKind = 'gpu' | 'cpu';

/** What a device is before it is measured: its kind and, where the driver tells it, its memory's peak bandwidth (GB/s). */
export interface DeviceHardware {
  readonly kind: DeviceKind;
  readonly memGBps?: number | null | undefined;
}

/** ms per GiB of weights per token on a device that reads them at `gbps` peak (a token reads every weight once). */
export function bandwidthMsPerGib(gbps: number): number {
  return (1000 * 1.073741824) / (gbps * BANDWIDTH_SHARE);
}

/** A never-measured device's ms per GiB: from its bandwidth where known, else its kind's default. */
export function defaultMsPerGib(hw: DeviceHardware): { msPerGib: number; source: 'bandwidth' | 'default' } {
  const bw = hw.memGBps;
  if (typeof bw === 'number' && Number.isFinite(bw) && bw > 0) return { msPerGib: bandwidthMsPerGib(bw), source: 'bandwidth' };
  return { msPerGib: DEFAULT_MS_PER_GIB[hw.kind], source: 'default' };
}

export interface DeviceSpeed {
  /** ms per GiB of layer weights per token, across the models measured here. */
  readonly msPerGib: number;
  /** ms per layer per token, by model name. */
  readonly perLayer: Readonly<Record<string, number>>;
  readonly samples: number;
  /** When last measured (ms since epoch). */
  readonly at: number;
}

export interface LayerModel {
  readonly name: string;
  readonly blockCount: number;
  /** Weights of the whole model (MB); a layer is taken as an equal share. */
  readonly weightsMb: number;
}

export interface LinkSpeed {
  /** The least round trip a ping took (ms): the link without a queue. */
  readonly rttMs: number | null;
  /** Bytes per ms the node read back during pushes (the tunnel's bulk pacer); null until a push ran. */
  readonly bytesPerMs: number | null;
}

/** A running estimate: the first sample as it is, then each new one weighted SPEED_DECAY. */
export function decayed(prev: number | undefined, sample: number): number {
  return prev === undefined ? sample : prev * (1 - SPEED_DECAY) + sample * SPEED_DECAY;
}

const gibPerLayer = (m: LayerModel): number => m.weightsMb / m.blockCount / 1024;

/** A device ran `layers` of model `m` in `ms` per generated token: its estimates for the model and across models move toward that. */
export function observeDevice(prev: DeviceSpeed | undefined, m: LayerModel, layers: number, ms: number, now: number): DeviceSpeed | undefined {
  if (!(ms > 0) || !Number.isFinite(ms) || !(layers > 0) || !(m.blockCount > 0) || !(m.weightsMb > 0)) return prev;
  const perLayer = ms / layers;
  return {
    msPerGib: decayed(prev?.msPerGib, perLayer / gibPerLayer(m)),
    perLayer: { ...prev?.perLayer, [m.name]: decayed(prev?.perLayer[m.name], perLayer) },
    samples: (prev?.samples ?? 0) + 1,
    at: now,
  };
}

export type SpeedSource = 'model' | 'device' | 'bandwidth' | 'default';

/** Predicted ms per layer per token of model `m` on a device, and what the number comes from. */
export function layerMs(speed: DeviceSpeed | undefined, hw: DeviceHardware, m: LayerModel): { ms: number; source: SpeedSource } {
  const own = speed?.perLayer[m.name];
  if (own !== undefined) return { ms: own, source: 'model' };
  if (speed) return { ms: speed.msPerGib * gibPerLayer(m), source: 'device' };
  const d = defaultMsPerGib(hw);
  return { ms: d.msPerGib * gibPerLayer(m), source: d.source };
}

/**
 * What one remote stage's link adds to a token: the hub waits on it once per token (LLAMA-NOTES: one round trip
 * per remote stage), sending the hidden state and getting the stage's output back.
 */
export function hopMs(link: LinkSpeed | undefined, hiddenBytes: number): number {
  const rtt = link?.rttMs ?? DEFAULT_LINK.rttMs;
  const rate = link?.bytesPerMs ?? DEFAULT_LINK.bytesPerMs;
  return rtt + (2 * hiddenBytes) / rate;
}

/** The bytes of one token's hidden state (f32 activations of the model's width); unknown width: 4096. */
export function hiddenBytes(embeddingLength: number | null | undefined): number {
  return 4 * (embeddingLength ?? 4096);
}

/**
 * One shard's measured time per token split into its stages: each remote stage's share is the hub's wait on it
 * (its median round trip) less the link's round trip; the hub's stage is what is left of the whole.
 * Null where the numbers cannot be split (no whole, or waits that exceed it).
 */
export function stageTimes(totalMs: number, remote: readonly { waitMs: number | null; rttMs: number | null }[]): { hubMs: number; remoteMs: number[] } | null {
  if (!(totalMs > 0) || remote.some((r) => r.waitMs === null)) return null;
  const remoteMs = remote.map((r) => Math.max(r.waitMs! * 0.05, r.waitMs! - (r.rttMs ?? 0)));
  const waited = remote.reduce((a, r) => a + r.waitMs!, 0);
  const hubMs = totalMs - waited;
  return hubMs > 0 ? { hubMs, remoteMs } : null;
}

/** Whether a shard's measured speed is far enough from its prediction that its next cold start plans again. */
export function wantsReplan(predictedMs: number | null | undefined, measuredMs: number | null | undefined): boolean {
  if (!predictedMs || !measuredMs) return false;
  return Math.abs(measuredMs - predictedMs) / predictedMs > REPLAN_THRESHOLD;
}
