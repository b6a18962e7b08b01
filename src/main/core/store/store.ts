import type { MemoryLayout } from '../gguf/memory.js';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Low, type Adapter } from 'lowdb';
import { readDurable, writeDurable } from '../durable.js';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import type { FlashAttn, KvCacheType, SpecSetting } from '../llama/argv.js';

/** A model's own llama-server settings over the pool-wide ones; how they apply is scheduler/decide/model-settings.ts. */
export interface ModelSettings {
  /** Context per slot (tokens). */
  ctx?: number;
  slots?: number;
  kv_cache_type?: KvCacheType;
  flash_attn?: FlashAttn;
  /**
   * The most tokens an answer gets where its request asks for none (llama-server's --n-predict: a request's own
   * max_tokens still wins): an agent that sends no limit cannot run a slot toward the end of its context.
   */
  max_tokens?: number;
  /** Speculative decoding (scheduler/decide/speculation.ts): absent = auto. */
  spec?: SpecSetting;
}

export const SCHEMA_VERSION = 2;

/** One file of a split model: where it is on the hub, its hash and the size and mtime it was hashed at. */
export interface ModelPart {
  path: string;
  sha256: string;
  size: number;
  mtimeMs: number;
}

/** A draft model: another registered model, as its file was when it was set, and how many tokens it drafts. */
export interface DraftRecord extends ModelPart {
  /** The registered model it is. */
  name: string;
  /** Its KV cache per token: the fit counts its cache at the target's context. */
  kv_bytes_per_token: number | null;
  /** Its per-layer cache layout (absent on older records: every layer keeps every token). */
  memory?: MemoryLayout | null;
  /** Tokens drafted per step, at most and at least (--spec-draft-n-max, --spec-draft-n-min). */
  max: number;
  min: number;
}

export interface ModelRecord {
  name: string;
  /** The GGUF llama-server is given: the file, or the first part of a split model. */
  path: string;
  /** The file's sha256; for a split model the split id over its parts' hashes (models/files.ts). */
  sha256: string;
  /** Bytes of the weights on disk (every part of a split model summed): the fit's weights. */
  size: number;
  mtimeMs: number;
  /** A split model's parts in load order (absent for a single file). */
  parts?: ModelPart[];
  required_vram_mb: number | null;
  arch: string | null;
  block_count: number | null;
  kv_bytes_per_token: number | null;
  /** The model's width (`<arch>.embedding_length`): a shard's hidden state per token is 4 × this bytes; absent on older records. */
  embedding_length?: number | null;
  /**
   * Per layer: K/V elements per token, sliding window, recurrent state (gguf/memory.ts), what the fit counts.
   * Absent on records made before relay read it: the fit then counts every layer at the whole context.
   */
  memory?: MemoryLayout | null;
  expert_count: number;
  expert_used_count: number;
  context_length: number | null;
  /** Next-token (MTP) layers the GGUF carries (`<arch>.nextn_predict_layers` with `blk.{last}.nextn.eh_proj`); absent: none. */
  mtp_layers?: number;
  /** Served on /v1/embeddings (its replicas run with --embedding). */
  embedding: boolean;
  /** Served on /v1/rerank (its replicas run with --reranking); absent on older records: false. */
  reranker?: boolean;
  /** The header's pooling type; an embedding model without one is served with mean pooling. */
  pooling_type?: number | null;
  /** Bytes of all tensors, and of the MoE expert tensors (ffn_{gate,up,down}_exps) among them; absent on older records. */
  tensor_bytes?: number | null;
  expert_bytes?: number | null;
  /** The model's own context, slots, KV cache type, flash attention (absent: the pool's defaults). */
  settings?: ModelSettings;
  /** Its vision projector (an mmproj GGUF): every llama-server of the model runs with --mmproj; absent: text only. */
  mmproj?: ModelPart;
  /** Its draft model for speculative decoding (models/draft.ts): whole-model placements load it beside it. */
  draft?: DraftRecord;
  added_at: string;
}

/** One device's speed as the store keeps it (scheduler/decide/speed.ts DeviceSpeed, with its machine and device). */
export interface StoredSpeed {
  machine: string;
  device: string;
  ms_per_gib: number;
  per_layer_ms: Record<string, number>;
  samples: number;
  at: number;
}

export interface NodeRecord {
  name: string;
  /** sha256 of the node's credential; the credential itself lives only on the node. */
  credential_sha256: string;
  created_at: string;
  revoked_at: string | null;
  last_seen: string | null;
  /** Refused at its last hello for its version (pool/versions.ts), as /status shows it; absent once it connects. */
  refused?: NodeRefusal;
}

export interface NodeRefusal {
  readonly code: 'version_mismatch';
  readonly update: 'node' | 'hub' | 'build';
  readonly summary: string;
  readonly message: string;
  readonly node_relay: string | null;
  readonly hub_relay: string;
  readonly at: string;
}

/** One /v1 API key as stored. The rules are absent on keys made before them: interactive, no quotas. */
export interface ApiKeyRecord {
  name: string;
  sha256: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  /** Its class: `background` requests wait behind `interactive` ones and give their slots up to them. */
  priority?: 'interactive' | 'background';
  /** Prompt and completion tokens it may use per day (the hub's local day); absent: no limit. */
  max_tokens_per_day?: number;
  /** Requests it may have in flight (waiting or answered) at once; absent: no limit. */
  max_concurrent?: number;
}

/** What one key used in one day. */
export interface DayUsage {
  prompt_tokens: number;
  completion_tokens: number;
  requests: number;
  /** Its answers that gave their slot to an interactive request and went on afterwards. */
  yields: number;
}

export interface StoreData {
  schemaVersion: number;
  models: ModelRecord[];
  nodes: NodeRecord[];
  /** Ids of join tokens already exchanged (each is good once). */
  used_join_tokens?: string[];
  /** /v1 API keys: names and SHA-256 digests (the keys themselves are shown once, never stored), and their rules. */
  api_keys?: ApiKeyRecord[];
  /** Tokens and requests per key and day (the hub's local date), the last KEPT_DAYS days; "" is requests with no key. */
  key_usage?: Record<string, Record<string, DayUsage>>;
  /** Each device's measured speed (scheduler/run/speeds.ts), kept across restarts so a plan need not wait for new answers. */
  device_speeds?: StoredSpeed[];
  /** The hub's own devices: its owner's pause toggle, schedule and auto-pause (absent = always available). */
  hub_availability?: { paused: boolean; schedule: string; auto_pause: boolean };
}

export function emptyStore(): StoreData {
  return { schemaVersion: SCHEMA_VERSION, models: [], nodes: [] };
}

/**
 * Migrations from each older schema version to the next. v1 (the first layout) held only `models`, without
 * the `embedding` flag.
 */
const MIGRATIONS: Record<number, (d: Record<string, unknown>) => Record<string, unknown>> = {
  1: (d) => ({
    ...d,
    schemaVersion: 2,
    models: ((d.models as Record<string, unknown>[] | undefined) ?? []).map((m) => ({ embedding: false, ...m })),
    nodes: [],
  }),
};

/** Parse and migrate; throws STORE_UNREADABLE (and never writes) when the file is not a store we understand. */
export function loadStoreData(text: string, path: string): { data: StoreData; migratedFrom: number | null } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new RelayError(ErrorCode.STORE_UNREADABLE, `the store ${path} is not valid JSON (${(err as Error).message}); it was left untouched`, { path });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new RelayError(ErrorCode.STORE_UNREADABLE, `the store ${path} is not a JSON object; it was left untouched`, { path });
  }
  let d = raw as Record<string, unknown>;
  const from = typeof d.schemaVersion === 'number' ? d.schemaVersion : 1;
  if (!Number.isInteger(from) || from < 1 || from > SCHEMA_VERSION) {
    throw new RelayError(ErrorCode.STORE_UNREADABLE, `the store ${path} has schema version ${String(d.schemaVersion)}; this relay understands 1..${SCHEMA_VERSION}. It was left untouched`, { path });
  }
  for (let v = from; v < SCHEMA_VERSION; v++) d = MIGRATIONS[v]!(d);
  if (!Array.isArray(d.models)) {
    throw new RelayError(ErrorCode.STORE_UNREADABLE, `the store ${path} has no models list; it was left untouched`, { path });
  }
  return { data: d as unknown as StoreData, migratedFrom: from === SCHEMA_VERSION ? null : from };
}

/** lowdb's file adapter, made durable: fsync, last good copy (see durable.ts). Writes only; Store.open reads. */
class DurableJsonFile implements Adapter<StoreData> {
  constructor(private readonly path: string) {}

  read(): Promise<StoreData | null> {
    return Promise.resolve(null);
  }

  write(data: StoreData): Promise<void> {
    writeDurable(this.path, JSON.stringify(data, null, 2));
    return Promise.resolve();
  }
}

/**
 * The hub's embedded JSON store (lowdb, with the durable adapter above: a killed hub leaves the old or the new
 * file, never a torn one and never none). Writes are serialized through `update`, which changes a copy of the
 * data and makes it the data only once it is on disk: a failed write (a full disk) changes nothing, in memory
 * or on disk, so a restart cannot undo what the hub already acted on.
 */
export class Store {
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly db: Low<StoreData>,
    readonly path: string,
    readonly migratedFrom: number | null,
    /** Set when relay.json was unreadable and the hub started from its last good copy: why. */
    readonly recovered: string | null,
  ) {}

  static async open(home: string): Promise<Store> {
    mkdirSync(home, { recursive: true });
    const path = join(home, 'relay.json');
    let data = emptyStore();
    let migratedFrom: number | null = null;
    const read = readDurable(path, (text) => loadStoreData(text, path));
    if (read) {
      ({ data, migratedFrom } = read.value);
      // Keep the pre-migration file: a migration is the one write that cannot be undone by the next one.
      if (migratedFrom !== null && existsSync(path)) copyFileSync(path, `${path}.v${migratedFrom}.bak`);
    }
    const db = new Low<StoreData>(new DurableJsonFile(path), data);
    db.data = data;
    const store = new Store(db, path, migratedFrom, read?.recovered ?? null);
    if (migratedFrom !== null || read === null || read.recovered !== null) await db.write();
    return store;
  }

  get data(): Readonly<StoreData> {
    return this.db.data;
  }

  /**
   * Apply `fn` to a copy of the data, persist the copy, then make it the data; one update at a time. When `fn`
   * throws or the write fails, the data is as it was. `fn` changes only what it is given (objects read from
   * `data` before are the old version afterwards).
   */
  update<T>(fn: (d: StoreData) => T): Promise<T> {
    const next = this.queue.then(async () => {
      const draft = structuredClone(this.db.data);
      const result = fn(draft);
      await this.db.adapter.write(draft);
      this.db.data = draft;
      return result;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  async close(): Promise<void> {
    await this.queue;
  }
}
