import type { KeyDto, NoKeyUsageDto } from './keys.js';
import type { MoveDto, RecentRequest } from './requests.js';
import type { DeviceSpeedStatus, LinkStatus, ReplanStatus } from './speeds.js';
export type { DeviceSpeedStatus, LinkStatus, ReplanStatus } from './speeds.js';
export type { MoveDto, RecentRequest } from './requests.js';
/**
 * The hub's /status (and /events, /api/nodes) as it goes over the wire: one set of shapes for the hub that
 * builds it (hub/observe/status.ts is typed against StatusDto), `relay status`, the tray and the tests. snake_case
 * throughout (the hub ↔ node protocol's camelCase DeviceInfo is mapped at the hub).
 */
import type { Availability, RunningReplica, RunningRpc } from './protocol.js';

export type KvCacheTypeName = 'f16' | 'q8_0' | 'q4_0';
export type PlacementStateName = 'starting' | 'ready' | 'failed' | 'stopping';

/** Why a placement failed: the message and the end of its process's output. */
export interface PlacementFailure {
  readonly message: string;
  readonly tail: string;
  readonly at: string;
}

export interface PlacementStatus {
  readonly id: string;
  readonly model: string;
  readonly state: PlacementStateName;
  /** The local llama-server (host replica, shard head); for a node replica, the node's. */
  readonly port: number | null;
  readonly pid: number | null;
  readonly ctx: number;
  readonly slots: number;
  readonly in_flight: number;
  readonly served: number;
  readonly kv_cache_type: KvCacheTypeName;
  readonly ms_per_token: number | null;
  /** Requests routed here because its KV cache held a prefix of their prompt (prefix-aware routing). */
  readonly prefix_hits: number;
  /** Recent prompt evaluation speed, milliseconds per token; null until measured. */
  readonly prompt_ms_per_token: number | null;
  /** Its speculative decoding (--spec-type: draft-simple, draft-mtp, an n-gram type) or null, and why. */
  readonly spec: string | null;
  readonly spec_why: string;
  /** With speculation: tokens drafted and accepted so far; a low share means drafting slows it. */
  readonly draft_tokens: { readonly drafted: number; readonly accepted: number } | null;
  readonly failure: PlacementFailure | null;
  /**
   * While its llama-server loads: since when, how long so far and the deadline (a base plus a term per GiB of
   * weights); null otherwise (ready, or still being pushed or filled: see pushes).
   */
  readonly load: { readonly since: string; readonly elapsed_ms: number; readonly deadline_ms: number } | null;
}

export interface ReplicaStatus extends PlacementStatus {
  readonly sha256: string;
  readonly where: 'host' | 'node';
  readonly node: string | null;
  readonly device: string;
  readonly flash_attn: 'on' | 'off' | 'auto';
  readonly need_mb: number;
  readonly started_at: string;
  readonly last_used_at: string;
  /** llama-server's load report for a host replica: where its weights and KV landed (`Vulkan0 model buffer size = …`). */
  readonly buffers: readonly string[];
}

export interface StageStatus {
  index: number;
  node: string | null;
  device: string;
  layers: [number, number];
  need_mb: number;
  free_mb: number;
  output: boolean;
  rpc_endpoint: string | null;
  rpc_bytes: number | null;
  rpc_round_trips: number | null;
  /** The plan's predicted ms per token for this stage (its layers, and a remote stage's hop). */
  predicted_ms: number | null;
  /** Its measured share of the shard's ms per token (a remote stage: the hub's wait on it less the link's round trip). */
  measured_ms: number | null;
}

export interface ShardStatus extends PlacementStatus {
  readonly stages: StageStatus[];
  /** The plan's predicted ms per generated token, beside the measured `ms_per_token`. */
  readonly predicted_ms_per_token: number | null;
  /** Measured and predicted differ past the threshold and the planner would now split it otherwise (else null). */
  readonly replan: ReplanStatus | null;
  readonly warnings: readonly string[];
  /** llama-server's own report of where the weights went (its "model buffer size" lines). */
  readonly buffers: readonly string[];
}

/** One of the hub's own devices, with what relay's placements have reserved taken off. */
export interface DeviceStatus {
  readonly id: string;
  readonly kind: 'gpu' | 'cpu';
  readonly description: string;
  readonly total_mb: number;
  readonly free_mb: number;
  readonly utilization_pct: number | null;
  readonly source: string;
  readonly bus_id: string | null;
  readonly speed?: DeviceSpeedStatus;
}

/** A node's device as its last report gave it (in /status: with the hub's reservations taken off). */
export interface NodeDeviceStatus {
  readonly id: string;
  readonly kind: 'gpu' | 'cpu';
  readonly description: string;
  readonly total_mb: number;
  readonly free_mb: number;
  /** How old the node's reading was when it reported. */
  readonly age_ms: number | null;
  readonly speed?: DeviceSpeedStatus;
}

/** A node as the hub sees it (also GET /api/nodes). */
export interface NodeStatus {
  readonly name: string;
  readonly state: Availability | 'offline' | 'revoked';
  readonly reason: string | null;
  readonly schedule: string | null;
  readonly connected: boolean;
  readonly devices: readonly NodeDeviceStatus[];
  readonly cache: readonly { sha256: string; size: number }[];
  readonly replicas: readonly RunningReplica[];
  /** The ggml-rpc-servers it runs for shard stages, by the node's last report. */
  readonly rpcs: readonly RunningRpc[];
  readonly last_seen: string | null;
  readonly created_at: string;
  readonly revoked_at: string | null;
  readonly bytes: { http: number; rpc: number; file: number } | null;
  /** Its link as measured (null: not connected). */
  readonly link: LinkStatus | null;
  /** The relay version its hello carried (null: relay 0.1.0 or older, or never connected). */
  readonly relay_version: string | null;
  /** Refused at its last hello (pool/versions.ts): which side to update; null once it connects. Its `reason` says it in short. */
  readonly refused: {
    readonly code: 'version_mismatch';
    readonly update: 'node' | 'hub' | 'build';
    readonly message: string;
    readonly node_relay: string | null;
    readonly hub_relay: string;
    readonly at: string;
  } | null;
}

export interface ModelStatus {
  readonly name: string;
  readonly size: number;
  readonly sha256: string;
  readonly path: string;
  /** Files: 1, or a split model's parts. */
  readonly parts: number;
  /** The file on disk now: as registered, gone, or changed (re-hashed before it is served; its placements stay when the bytes are the same). */
  readonly file: 'ok' | 'missing' | 'changed';
  /** The model's own settings (absent ones are the pool's), null for none. */
  readonly settings: { readonly ctx?: number; readonly slots?: number; readonly kv_cache_type?: KvCacheTypeName; readonly flash_attn?: 'on' | 'off' | 'auto' } | null;
  readonly need_mb: number;
  /**
   * The need in parts (MiB): the spec's weights, KV (kv_window_mb of it for sliding-window layers) and overhead;
   * the measured additions state (recurrent), blocks (a quantized cache's scales) and compute (logits, and
   * attention scores without flash attention); projector and draft. `largest` names the part that dominates.
   */
  readonly need: {
    weights_mb: number;
    kv_mb: number;
    kv_window_mb: number;
    state_mb: number;
    blocks_mb: number;
    overhead_mb: number;
    compute_mb: number;
    projector_mb: number;
    draft_mb: number;
    ctx: number;
    slots: number;
    kv_scale: number;
    kv_cache_type: string;
    flash_attn: boolean;
    largest: string;
  };
  /** Where more context was asked than the GGUF was trained for: that each slot gets the training context; else null. */
  readonly ctx_note: string | null;
  readonly fits_now: boolean;
  readonly shortfall: string | null;
  /** The shortfall in one line (need vs the largest free room, then what would make room); the 503's details.why_not. */
  readonly why_not: string | null;
  readonly embedding: boolean;
  /** Its vision projector (it sees images), or null for a text-only model. */
  readonly mmproj: { readonly path: string; readonly sha256: string; readonly size: number } | null;
  /** Its draft model for speculative decoding (relay models set NAME --draft OTHER), or null. */
  readonly draft: { readonly name: string; readonly path: string; readonly sha256: string; readonly size: number; readonly max: number; readonly min: number } | null;
  /**
   * Speculation: the owner's setting (auto unless set), what its next whole-model placement runs and why (a type
   * that did not pay is turned off, said here), and what its placements drafted and had accepted since the hub started.
   */
  readonly spec: {
    readonly setting: string;
    readonly type: string | null;
    readonly why: string;
    readonly tally: { readonly type: string; readonly drafted: number; readonly accepted: number } | null;
  };
}

export interface HubAvailabilityStatus {
  readonly availability: Availability;
  readonly reason: string | null;
  readonly paused: boolean;
  readonly schedule: string;
  readonly auto_pause: boolean;
}

export interface PushStatus {
  readonly node: string;
  readonly model: string;
  readonly sha256: string;
  readonly done: number;
  readonly total: number;
  readonly started_at: string;
}

/** One entry of GET /v1/models: OpenAI's fields, and whether the pool can serve the model now (and why not). */
export interface V1ModelDto {
  readonly id: string;
  readonly object: 'model';
  readonly created: number;
  readonly owned_by: 'relay';
  readonly available: boolean;
  readonly unavailable_reason: string | null;
  /** What it takes as input: text, and image when it has a vision projector. */
  readonly input_modalities: readonly ('text' | 'image')[];
}

/** The pool-wide settings in effect, as /status shows them. */
export interface PoolSettingsStatus {
  readonly context_size: number;
  readonly replica_ctx: number;
  readonly parallel_slots: number;
  readonly kv_cache_type: KvCacheTypeName;
  /** on, off or auto when set; unset: what llama.cpp does for the cache type, in words. */
  readonly flash_attn: string;
  readonly cpu_budget_mb: number;
  readonly keep_alive_ms: number;
  readonly api_key_required: boolean;
  readonly queue_max: number;
  readonly queue_timeout_ms: number;
  readonly max_placements_per_model: number;
}

/** One placement's share of a device in the pool picture: a replica, or one stage of a shard. */
export interface PictureSegment {
  readonly placement: string;
  readonly model: string;
  readonly kind: 'replica' | 'stage';
  /** For a shard's stage: its place in execution order (1-based), how many there are, its layers, and whether it holds the output. */
  readonly stage: { readonly index: number; readonly of: number; readonly layers: readonly [number, number]; readonly output: boolean } | null;
  readonly state: PlacementStateName;
  /** What relay reserved for it on this device. */
  readonly mb: number;
  readonly in_flight: number;
  readonly slots: number;
  readonly tokens_per_second: number | null;
  readonly load: PlacementStatus['load'];
}

/** A device in the pool picture: relay's placements, then other programs' use, then free room (MB; they add up to total_mb). */
export interface PictureDevice {
  readonly id: string;
  readonly kind: 'gpu' | 'cpu';
  readonly description: string;
  readonly total_mb: number;
  readonly free_mb: number;
  readonly other_mb: number;
  readonly segments: readonly PictureSegment[];
  readonly speed: DeviceSpeedStatus | null;
}

/** A machine of the pool (the hub, then each node) as the dashboard's picture draws it. */
export interface PictureMachine {
  /** "hub", or the node's name. */
  readonly name: string;
  readonly role: 'hub' | 'node';
  readonly state: Availability | 'offline' | 'revoked';
  /** Why it is paused (its owner, its schedule, auto-pause), or null. */
  readonly reason: string | null;
  readonly devices: readonly PictureDevice[];
  /** A node's link (null: the hub, or not connected). */
  readonly link: LinkStatus | null;
  /** Models kept off this machine after a failure. */
  readonly backoffs: readonly { readonly model: string; readonly reason: string; readonly until: string }[];
  /** Weight pushes to this machine in progress (bytes). */
  readonly pushes: readonly { readonly model: string; readonly done: number; readonly total: number }[];
}

/** GET /status. */
export interface StatusDto {
  readonly relay: string;
  readonly llama_cpp: { readonly tag: string; readonly version: string; readonly backend: string; readonly backend_reason: string };
  readonly kv_cache_type: KvCacheTypeName;
  readonly settings: PoolSettingsStatus;
  readonly hub: HubAvailabilityStatus;
  readonly devices: readonly DeviceStatus[];
  readonly models: readonly ModelStatus[];
  readonly replicas: readonly ReplicaStatus[];
  readonly shards: readonly ShardStatus[];
  readonly backoffs: readonly { node: string; model: string; failures: number; reason: string; since: string; until: string }[];
  readonly queues: readonly { model: string; waiting: number }[];
  readonly api_keys: readonly KeyDto[];
  readonly no_key_usage: NoKeyUsageDto;
  readonly nodes: readonly NodeStatus[];
  /** The pool at a glance: every machine with its devices and what runs on them (built from the fields above). */
  readonly machines: readonly PictureMachine[];
  readonly pushes: readonly PushStatus[];
  /** Downloads from Hugging Face (`relay models pull`), running and recently finished. */
  readonly pulls: readonly PullView[];
  readonly recent: readonly RecentRequest[];
  /** Answers moved mid-stream, the newest first (the last 20). */
  readonly moves: readonly MoveDto[];
}

/** One `relay models pull`: what it fetches and how far it is. */
export interface PullView {
  readonly id: string;
  /** What was asked for: owner/repo[:QUANT] or owner/repo/FILE. */
  readonly spec: string;
  readonly repo: string;
  readonly commit: string;
  /** The name it is registered under. */
  readonly name: string;
  readonly quant: string;
  /** The model's files (every part of a split model) and its projector, with their sizes. */
  readonly files: readonly { readonly path: string; readonly size: number }[];
  readonly projector: string | null;
  /** stopped: the hub stopped mid-download (it resumes at the next start). */
  readonly state: 'downloading' | 'registering' | 'done' | 'failed' | 'cancelled' | 'stopped';
  readonly done_bytes: number;
  readonly total_bytes: number;
  readonly rate_bps: number;
  readonly eta_s: number | null;
  readonly error: { readonly code: string; readonly message: string } | null;
  readonly started_at: string;
}
