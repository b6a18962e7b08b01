/**
 * Stable error codes. A code, once published, keeps its meaning: clients, the CLI and tests match on it.
 * Each surface (HTTP, control protocol, IPC, CLI exit) maps codes through one table, never by message text.
 */
export const ErrorCode = {
  // GGUF reader
  GGUF_TRUNCATED: 'GGUF_TRUNCATED',
  GGUF_BAD_MAGIC: 'GGUF_BAD_MAGIC',
  GGUF_UNSUPPORTED_VERSION: 'GGUF_UNSUPPORTED_VERSION',
  GGUF_LIMIT_EXCEEDED: 'GGUF_LIMIT_EXCEEDED',
  GGUF_BAD_VALUE_TYPE: 'GGUF_BAD_VALUE_TYPE',
  GGUF_BAD_TENSOR: 'GGUF_BAD_TENSOR',
  GGUF_DUPLICATE: 'GGUF_DUPLICATE',
  GGUF_BAD_ALIGNMENT: 'GGUF_BAD_ALIGNMENT',
  GGUF_BAD_UTF8: 'GGUF_BAD_UTF8',
  GGUF_NOT_A_MODEL: 'GGUF_NOT_A_MODEL',
  /** A vision projector (general.architecture = clip) registered as a model: it loads only beside one. */
  GGUF_IS_PROJECTOR: 'GGUF_IS_PROJECTOR',
  /** A file given as a model's projector (--mmproj) that is not one. */
  MMPROJ_NOT_A_PROJECTOR: 'MMPROJ_NOT_A_PROJECTOR',
  /** A draft model (speculative decoding) whose vocabulary is not the target's. */
  DRAFT_VOCAB_MISMATCH: 'DRAFT_VOCAB_MISMATCH',
  /** An image sent to a model registered without a vision projector. */
  MODEL_NOT_VISION: 'MODEL_NOT_VISION',
  /** An image given as a remote http(s) URL: the hub does not fetch on a client's behalf. */
  IMAGE_URL_NOT_ALLOWED: 'IMAGE_URL_NOT_ALLOWED',
  /** RELAY_FETCH_IMAGES on, and an image link could not be fetched (not found, not an image, too big, too slow). */
  IMAGE_FETCH_FAILED: 'IMAGE_FETCH_FAILED',
  /** A split GGUF given by a later part, missing a part, or with parts that do not agree. */
  GGUF_BAD_SPLIT: 'GGUF_BAD_SPLIT',
  // llama.cpp binaries and child processes
  LLAMA_NOT_FOUND: 'LLAMA_NOT_FOUND',
  LLAMA_BUILD_FAILED: 'LLAMA_BUILD_FAILED',
  LLAMA_SOURCE_INTEGRITY: 'LLAMA_SOURCE_INTEGRITY',
  /** A backend module package from the registry does not hash to its pinned integrity. */
  BACKEND_INTEGRITY: 'BACKEND_INTEGRITY',
  /** The backend asked for (--backend / RELAY_LLAMA_BACKEND) cannot run on this machine. */
  BACKEND_UNAVAILABLE: 'BACKEND_UNAVAILABLE',
  CHILD_SPAWN_FAILED: 'CHILD_SPAWN_FAILED',
  CHILD_EXITED_EARLY: 'CHILD_EXITED_EARLY',
  CHILD_READY_TIMEOUT: 'CHILD_READY_TIMEOUT',
  /** A child stopped (SIGSTOP, a debugger) while it loaded: it would never become ready. */
  CHILD_STOPPED: 'CHILD_STOPPED',
  // store and registry
  STORE_UNREADABLE: 'STORE_UNREADABLE',
  MODEL_NOT_FOUND: 'MODEL_NOT_FOUND',
  MODEL_EXISTS: 'MODEL_EXISTS',
  MODEL_FILE_MISSING: 'MODEL_FILE_MISSING',
  MODEL_NOT_EMBEDDING: 'MODEL_NOT_EMBEDDING',
  /** /v1/rerank for a model not registered as a reranker. */
  MODEL_NOT_RERANKER: 'MODEL_NOT_RERANKER',
  // placement and serving
  MODEL_UNAVAILABLE: 'MODEL_UNAVAILABLE',
  /** M would fit once busy placements finish, paused machines return or backoffs expire; or its queue is full. */
  POOL_BUSY: 'POOL_BUSY',
  REPLICA_FAILED: 'REPLICA_FAILED',
  UPSTREAM_ERROR: 'UPSTREAM_ERROR',
  /** A load did not finish within its deadline (the base plus the per-GiB term for the model's size). */
  LOAD_TIMEOUT: 'LOAD_TIMEOUT',
  /** A request that did not fit the placement's context (llama-server's exceed_context_size_error). */
  CONTEXT_LENGTH_EXCEEDED: 'CONTEXT_LENGTH_EXCEEDED',
  /** llama-server does not support what the request asks for (its not_supported_error). */
  NOT_SUPPORTED: 'NOT_SUPPORTED',
  /** llama-server refused this request with an error of its own (its server_error): the request's, not the placement's. */
  LLAMA_SERVER_ERROR: 'LLAMA_SERVER_ERROR',
  // tunnel
  SESSION_CLOSED: 'SESSION_CLOSED',
  STREAM_RESET: 'STREAM_RESET',
  KEEPALIVE_TIMEOUT: 'KEEPALIVE_TIMEOUT',
  TUNNEL_PROTOCOL: 'TUNNEL_PROTOCOL',
  /** The peer does not read (its control-frame queue passed the cap) or floods the session. */
  TUNNEL_OVERLOAD: 'TUNNEL_OVERLOAD',
  // nodes
  NODE_AUTH: 'NODE_AUTH',
  VERSION_MISMATCH: 'VERSION_MISMATCH',
  NODE_NOT_FOUND: 'NODE_NOT_FOUND',
  NODE_LOST: 'NODE_LOST',
  /** Another agent with the same credential is connected and alive. */
  NODE_IN_USE: 'NODE_IN_USE',
  CACHE_FULL: 'CACHE_FULL',
  DISK_FULL: 'DISK_FULL',
  PUSH_INCOMPLETE: 'PUSH_INCOMPLETE',
  /** A weight push moved no byte for RELAY_PUSH_STALL_MS while the node still answered pings (its disk, its cache). */
  PUSH_STALLED: 'PUSH_STALLED',
  HASH_MISMATCH: 'HASH_MISMATCH',
  // Pulls from Hugging Face
  HF_REPO_NOT_FOUND: 'HF_REPO_NOT_FOUND',
  /** The repository asks for accepted terms: a token of an account that accepted them (HF_TOKEN). */
  HF_GATED: 'HF_GATED',
  HF_FILE_NOT_FOUND: 'HF_FILE_NOT_FOUND',
  HF_NO_GGUF: 'HF_NO_GGUF',
  HF_QUANT_NOT_FOUND: 'HF_QUANT_NOT_FOUND',
  /** Several files match: the message lists them, name one. */
  HF_AMBIGUOUS: 'HF_AMBIGUOUS',
  /** The Hub or its file server cannot be reached, or the connection kept dropping (pull again: it resumes). */
  HF_UNREACHABLE: 'HF_UNREACHABLE',
  PULL_NOT_FOUND: 'PULL_NOT_FOUND',
  PULL_CANCELLED: 'PULL_CANCELLED',
  // HTTP surface
  INVALID_REQUEST: 'INVALID_REQUEST',
  INVALID_JSON: 'INVALID_JSON',
  PAYLOAD_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  INVALID_API_KEY: 'INVALID_API_KEY',
  KEY_EXISTS: 'KEY_EXISTS',
  KEY_NOT_FOUND: 'KEY_NOT_FOUND',
  /** A key's tokens for the day are used up (429; Retry-After: the next local midnight). */
  KEY_QUOTA_EXCEEDED: 'KEY_QUOTA_EXCEEDED',
  /** A key has as many requests in flight as it may (429). */
  KEY_BUSY: 'KEY_BUSY',
  /** A request asked for a class above its key's (X-Relay-Priority: interactive with a background key). */
  PRIORITY_NOT_ALLOWED: 'PRIORITY_NOT_ALLOWED',
  FORBIDDEN: 'FORBIDDEN',
  NOT_FOUND: 'NOT_FOUND',
  /** The Host header does not name this hub (DNS rebinding). */
  MISDIRECTED_REQUEST: 'MISDIRECTED_REQUEST',
  /** A JSON endpoint got a body of another type. */
  UNSUPPORTED_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  HUB_UNREACHABLE: 'HUB_UNREACHABLE',
  /** A port the hub was told to listen on is taken by another program. */
  PORT_IN_USE: 'PORT_IN_USE',
  // generic
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  IO_ERROR: 'IO_ERROR',
  INTERNAL: 'INTERNAL',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export class RelayError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>>;
  /** An HTTP status other than the code's usual one (pool_busy: 429 for a full queue, 503 otherwise). */
  readonly httpStatus: number | undefined;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, options?: { cause?: unknown; status?: number }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RelayError';
    this.code = code;
    this.details = details;
    this.httpStatus = options?.status;
  }

  toJSON(): { code: ErrorCode; message: string; details: Readonly<Record<string, unknown>> } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

/**
 * One spelling on every wire: HTTP bodies and node↔hub replies carry the code in lower case; a peer's code is
 * read back through `fromWireCode`, so a node's model_unavailable is the hub's MODEL_UNAVAILABLE (and reaches a
 * client as 503 model_unavailable). An unknown code (a newer peer) reads as UPSTREAM_ERROR.
 */
export function wireCode(code: ErrorCode): string {
  return code.toLowerCase();
}

const KNOWN_CODES = new Set<string>(Object.values(ErrorCode));

export function fromWireCode(code: string | undefined): ErrorCode {
  const up = (code ?? '').toUpperCase();
  return KNOWN_CODES.has(up) ? (up as ErrorCode) : ErrorCode.UPSTREAM_ERROR;
}

export function isRelayError(err: unknown, code?: ErrorCode): err is RelayError {
  return err instanceof RelayError && (code === undefined || err.code === code);
}

/**
 * How each code surfaces over HTTP: status and the OpenAI error `type`. The body is always
 * `{ error: { code: <code in lower case>, message, type } }`. Codes not listed are 500 server_error.
 */
export const HTTP_ERRORS: Readonly<Partial<Record<ErrorCode, { status: number; type: string }>>> = {
  GGUF_TRUNCATED: { status: 422, type: 'invalid_request_error' },
  GGUF_BAD_MAGIC: { status: 422, type: 'invalid_request_error' },
  GGUF_UNSUPPORTED_VERSION: { status: 422, type: 'invalid_request_error' },
  GGUF_LIMIT_EXCEEDED: { status: 422, type: 'invalid_request_error' },
  GGUF_BAD_VALUE_TYPE: { status: 422, type: 'invalid_request_error' },
  GGUF_BAD_TENSOR: { status: 422, type: 'invalid_request_error' },
  GGUF_DUPLICATE: { status: 422, type: 'invalid_request_error' },
  GGUF_BAD_ALIGNMENT: { status: 422, type: 'invalid_request_error' },
  GGUF_BAD_UTF8: { status: 422, type: 'invalid_request_error' },
  GGUF_NOT_A_MODEL: { status: 422, type: 'invalid_request_error' },
  GGUF_IS_PROJECTOR: { status: 422, type: 'invalid_request_error' },
  MMPROJ_NOT_A_PROJECTOR: { status: 422, type: 'invalid_request_error' },
  DRAFT_VOCAB_MISMATCH: { status: 422, type: 'invalid_request_error' },
  MODEL_NOT_VISION: { status: 400, type: 'invalid_request_error' },
  IMAGE_URL_NOT_ALLOWED: { status: 400, type: 'invalid_request_error' },
  IMAGE_FETCH_FAILED: { status: 400, type: 'invalid_request_error' },
  GGUF_BAD_SPLIT: { status: 422, type: 'invalid_request_error' },
  MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  MODEL_EXISTS: { status: 409, type: 'invalid_request_error' },
  MODEL_FILE_MISSING: { status: 422, type: 'invalid_request_error' },
  MODEL_NOT_EMBEDDING: { status: 400, type: 'invalid_request_error' },
  MODEL_NOT_RERANKER: { status: 400, type: 'invalid_request_error' },
  MODEL_UNAVAILABLE: { status: 503, type: 'server_error' },
  POOL_BUSY: { status: 503, type: 'server_error' },
  NODE_AUTH: { status: 401, type: 'authentication_error' },
  NODE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  NODE_LOST: { status: 502, type: 'server_error' },
  REPLICA_FAILED: { status: 502, type: 'server_error' },
  UPSTREAM_ERROR: { status: 502, type: 'server_error' },
  LOAD_TIMEOUT: { status: 502, type: 'server_error' },
  PUSH_STALLED: { status: 502, type: 'server_error' },
  CONTEXT_LENGTH_EXCEEDED: { status: 400, type: 'invalid_request_error' },
  NOT_SUPPORTED: { status: 501, type: 'invalid_request_error' },
  LLAMA_SERVER_ERROR: { status: 500, type: 'server_error' },
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error' },
  INVALID_JSON: { status: 400, type: 'invalid_request_error' },
  INVALID_ARGUMENT: { status: 400, type: 'invalid_request_error' },
  PORT_IN_USE: { status: 500, type: 'server_error' },
  PAYLOAD_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  INVALID_API_KEY: { status: 401, type: 'authentication_error' },
  KEY_EXISTS: { status: 409, type: 'invalid_request_error' },
  KEY_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  KEY_QUOTA_EXCEEDED: { status: 429, type: 'rate_limit_error' },
  KEY_BUSY: { status: 429, type: 'rate_limit_error' },
  PRIORITY_NOT_ALLOWED: { status: 403, type: 'permission_error' },
  FORBIDDEN: { status: 403, type: 'permission_error' },
  NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  MISDIRECTED_REQUEST: { status: 421, type: 'invalid_request_error' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error' },
  IO_ERROR: { status: 422, type: 'invalid_request_error' },
  HF_REPO_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  HF_GATED: { status: 403, type: 'permission_error' },
  HF_FILE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  HF_NO_GGUF: { status: 422, type: 'invalid_request_error' },
  HF_QUANT_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  HF_AMBIGUOUS: { status: 409, type: 'invalid_request_error' },
  HF_UNREACHABLE: { status: 502, type: 'server_error' },
  PULL_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  DISK_FULL: { status: 507, type: 'server_error' },
};

export interface HttpErrorBody {
  error: { code: string; message: string; type: string; details?: Readonly<Record<string, unknown>> };
}

export function httpError(err: RelayError): { status: number; body: HttpErrorBody } {
  const m = HTTP_ERRORS[err.code] ?? { status: 500, type: 'server_error' };
  const details = Object.keys(err.details).length > 0 ? { details: err.details } : {};
  return { status: err.httpStatus ?? m.status, body: { error: { code: wireCode(err.code), message: err.message, type: m.type, ...details } } };
}
