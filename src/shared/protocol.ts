/**
 * The hub ↔ node wire, version 2 (docs/protocol.md is the prose of this file; 2 added `rpc-loaded` and the
 * tunnel's window returned every 256 KiB read, which paced file streams rely on).
 *
 * Transport: one WebSocket (subprotocol `relay.v2`, credential in the Authorization header) carrying one
 * yamux session; the node is the yamux client. Every yamux stream starts with one header line of JSON
 * (`StreamHeader`) then carries its kind's bytes. The control stream carries newline-delimited JSON
 * messages, each validated here before anything acts on it.
 */
export const PROTOCOL_VERSION = 2;
export const WS_SUBPROTOCOL = `relay.v${PROTOCOL_VERSION}`;
export const TUNNEL_PATH = '/tunnel';
export const MAX_HEADER_LINE_BYTES = 4096;
export const MAX_CONTROL_LINE_BYTES = 1024 * 1024;
/**
 * Bytes of control messages that may wait for a peer that does not read its control stream; one more and the
 * peer is dropped (tunnel_overload). A few hundred commands' worth: a healthy peer never gets near it.
 */
export const MAX_CONTROL_QUEUE_BYTES = 4 * 1024 * 1024;
/**
 * Malformed control lines a peer may send in a minute: each of the first answered with an error message (at most
 * MAX_BAD_LINE_ANSWERS of them), past the limit the peer is dropped (tunnel_protocol) as hostile or broken.
 */
export const MAX_BAD_LINES_PER_MINUTE = 1000;
export const MAX_BAD_LINE_ANSWERS = 100;
/**
 * Receive window per tunnel stream. A weight push needs several MiB in flight to keep a fast link busy
 * (measured in bench/tunnel: 1 MiB ~900 MB/s, 16 MiB ~1,300 MB/s on loopback); it is also the most a stalled
 * reader can make its side buffer.
 */
export const TUNNEL_STREAM_WINDOW = 8 * 1024 * 1024;

export type StreamKind = 'control' | 'rpc' | 'http' | 'file' | 'slot';

export type StreamHeader = { kind: 'control' } | { kind: 'http'; replica: string } | { kind: 'rpc'; rpc: string } | { kind: 'file'; sha256: string; offset: number; size: number } | SlotStreamHeader;

/**
 * A slot's saved state (llama-server's KV of one conversation) crossing the tunnel: `get` fetches one the node kept
 * when it stopped `replica` (the node answers a JSON line `{ok, bytes, sha256}` or `{ok: false, message}`, then the
 * bytes, and forgets the file); `put` sends `size` bytes that hash to `sha256` into slot `slot` of the running
 * `replica` (answered with a line `{ok, message?}` once llama-server has read them back); `tokens` asks for the token
 * lists of the running `replica`'s idle slots — an answer just yielded one; the node waits until at most `busy` slots
 * still generate (the yielded one has stopped), saves each idle one, reads its head and removes it — answered with one JSON document `{ok, slots: [{slot, tokens}]}` or `{ok: false, message}`, then the end.
 */
export type SlotStreamHeader =
  | { kind: 'slot'; op: 'get'; replica: string; slot: number }
  | { kind: 'slot'; op: 'put'; replica: string; slot: number; size: number; sha256: string }
  | { kind: 'slot'; op: 'tokens'; replica: string; busy: number };

/** One slot a node saved when it stopped a replica, as the stop-replica reply lists it (`data.slots`). */
export interface SavedSlot {
  slot: number;
  bytes: number;
  sha256: string;
}

export type Availability = 'idle' | 'busy' | 'paused';

export interface DeviceInfo {
  id: string;
  kind: 'gpu' | 'cpu';
  description: string;
  totalMb: number;
  freeMb: number;
  /**
   * How old `freeMb` was when the message was sent (ms; absent from older nodes). The hub dates the reading by
   * its own clock from it, so a replica that became ready after the reading still counts as using memory.
   */
  ageMs?: number;
  /** The device memory's peak bandwidth (GB/s) where the driver tells it (NVML); absent from older nodes. */
  memGBps?: number;
}

export interface CachedFile {
  sha256: string;
  size: number;
}

export interface RunningReplica {
  replica: string;
  sha256: string;
  pid: number | null;
  /** Loading (its process exists, /health not yet answering) or ready; absent from older nodes: ready. */
  state?: 'loading' | 'ready';
}

/** A ggml-rpc-server the node runs for a shard stage (reported so the hub can stop one it no longer expects). */
export interface RunningRpc {
  rpc: string;
  pid: number | null;
}

/**
 * The node's first message. `protocol`, `node`, `llama` and `relay` keep their meaning in every protocol version, so
 * a hub can refuse a node of another version by name and say which side to update (pool/versions.ts); the rest is
 * checked only when the protocol is the hub's own.
 */
export interface Hello {
  type: 'hello';
  protocol: number;
  node: string;
  llama: string;
  /** The node's relay version (package.json); absent from relay 0.1.0 and older. */
  relay?: string;
  devices: DeviceInfo[];
  cache: CachedFile[];
  partials: CachedFile[];
  replicas: RunningReplica[];
  /** Its rpc-servers (absent from older nodes). */
  rpcs?: RunningRpc[];
  availability: Availability;
  reason: string | null;
  /** The owner's weekly pause windows, as written (shown on the dashboard). */
  schedule?: string;
}

export interface Heartbeat {
  type: 'heartbeat';
  devices: DeviceInfo[];
  availability: Availability;
  reason: string | null;
  replicas: RunningReplica[];
  rpcs?: RunningRpc[];
  cache: CachedFile[];
  schedule?: string;
}

export interface AvailabilityMsg {
  type: 'availability';
  availability: Availability;
  reason: string | null;
}

export interface StartReplica {
  type: 'start-replica';
  id: number;
  replica: string;
  /** The model's sha256 (a split model's split id). */
  sha256: string;
  /** A split model's parts, by sha256 in load order (each a file in the node's cache); absent for one file. */
  parts?: string[];
  ctx: number;
  slots: number;
  cacheType: 'f16' | 'q8_0' | 'q4_0';
  flashAttn: 'on' | 'off' | 'auto' | null;
  embedding: boolean;
  /** A reranker: its llama-server runs with --reranking (absent: not one). */
  reranking?: boolean;
  /** A vision model's projector, by sha256 (a file in the node's cache): --mmproj (absent: text only). */
  mmproj?: string;
  /** A draft model for speculative decoding, by sha256 (a file in the node's cache), and its tokens per step. */
  draft?: { sha256: string; max: number; min: number };
  pooling: 'mean' | null;
  /** Speculation without a draft model: --spec-type (an n-gram type, or draft-mtp); absent: none, or `draft`'s. */
  specType?: 'draft-mtp' | 'ngram-simple' | 'ngram-map-k' | 'ngram-map-k4v' | 'ngram-mod' | 'ngram-cache';
  /** The model's own cap on an answer that asks for no length: --n-predict (absent: none). */
  nPredict?: number;
  alias: string;
  /** The node device the hub placed it on: a llama.cpp device name, or CPU for the node's CPU budget. */
  device: string;
  /** The load's deadline (the hub's rule: a base plus a term per GiB of weights); absent from older hubs: 10 minutes. */
  loadTimeoutMs?: number;
  /**
   * Keep its conversations: when it stops, the node saves the slots that hold a prompt (at most this many bytes in
   * all) before its process goes, and the stop-replica reply lists them for the hub to fetch (absent: none kept).
   */
  keepSlotsBytes?: number;
  /** KV bytes a token takes at its cache type (the hub's estimate): a save over the budget is skipped before a byte is written. */
  slotBytesPerToken?: number;
}

export interface StopReplica {
  type: 'stop-replica';
  id: number;
  replica: string;
}
/** What a shard stage is, so the node can say what it runs (tray, local API): stage `index` of `of`, 0-based. */
export interface StageInfo {
  model: string;
  index: number;
  of: number;
  layers: [number, number];
}
/** `device`: the node device the stage runs on (ggml-rpc-server -d); without it ggml-rpc-server serves every GPU at once. */
export interface StartRpc {
  type: 'start-rpc';
  id: number;
  rpc: string;
  cache: boolean;
  stage?: StageInfo;
  device?: string;
}
export interface StopRpc {
  type: 'stop-rpc';
  id: number;
  rpc: string;
}
export interface Evict {
  type: 'evict';
  id: number;
  sha256: string;
}
export interface PushBegin {
  type: 'push-begin';
  id: number;
  sha256: string;
  size: number;
  /** The other parts of the same split model: the node does not evict them to make room for this one. */
  siblings?: string[];
}

/** Fill ggml-rpc-server's tensor cache from the node's own copy of a GGUF (a shard's cold load then moves no large tensor). */
export interface FillRpcCache {
  type: 'fill-rpc-cache';
  id: number;
  sha256: string;
  /** Only the tensors of the stage's layers [first, end) (absent: every tensor over the threshold). */
  layers?: [number, number];
  /** The other parts of its split model: not evicted to make room for this fill. */
  siblings?: string[];
}

/**
 * A shard stage has loaded: what its ggml-rpc-server saved to its cache until now are that model's weights (sent in
 * full because the node held no copy to fill from), kept under `sha256`'s index; anything saved later is not.
 */
export interface RpcLoaded {
  type: 'rpc-loaded';
  id: number;
  rpc: string;
  sha256: string;
  /**
   * The stage's weight files as the hub named them from its own copy (each tensor over 10 MiB of the stage's layers:
   * its FNV-1a 64 and size): the only files of its load the node may record as weights, and only whole.
   */
  weights?: { name: string; size: number }[];
}

/** The hub's admin pauses or resumes a node's sharing (the dashboard's per-node control). */
export interface SetPaused {
  type: 'set-paused';
  id: number;
  paused: boolean;
}

/**
 * Whether a replica's llama-server or a stage's rpc-server can still answer: the hub asks when a request through
 * it has heard nothing for a while and the node answers pings. Reply `{liveness}`: ok | stopped | unresponsive | gone.
 */
export interface CheckWorkload {
  type: 'check';
  id: number;
  replica?: string;
  rpc?: string;
}

export type Command = StartReplica | StopReplica | StartRpc | StopRpc | Evict | PushBegin | FillRpcCache | RpcLoaded | SetPaused | CheckWorkload;
type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;
/** A command as the hub writes it; the control channel adds the correlation id. */
export type CommandBody = WithoutId<Command>;

export interface Reply {
  type: 'reply';
  id: number;
  ok: boolean;
  code?: string;
  message?: string;
  data?: Record<string, unknown>;
}

export interface Welcome {
  type: 'welcome';
  protocol: number;
  hub: string;
}
export interface ErrorMsg {
  type: 'error';
  code: string;
  message: string;
}

export type NodeToHub = Hello | Heartbeat | AvailabilityMsg | Reply | ErrorMsg;
export type HubToNode = Welcome | Command | ErrorMsg;

// The validators of every message and stream header: protocol-validate.ts.
