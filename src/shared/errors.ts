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
  // llama.cpp binaries and child processes
  LLAMA_NOT_FOUND: 'LLAMA_NOT_FOUND',
  LLAMA_BUILD_FAILED: 'LLAMA_BUILD_FAILED',
  LLAMA_SOURCE_INTEGRITY: 'LLAMA_SOURCE_INTEGRITY',
  CHILD_SPAWN_FAILED: 'CHILD_SPAWN_FAILED',
  CHILD_EXITED_EARLY: 'CHILD_EXITED_EARLY',
  CHILD_READY_TIMEOUT: 'CHILD_READY_TIMEOUT',
  // generic
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  IO_ERROR: 'IO_ERROR',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export class RelayError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RelayError';
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: ErrorCode; message: string; details: Readonly<Record<string, unknown>> } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export function isRelayError(err: unknown, code?: ErrorCode): err is RelayError {
  return err instanceof RelayError && (code === undefined || err.code === code);
}
