export { parseGguf, readGgufFile, metaValue, bufferSource, DEFAULT_GGUF_LIMITS } from './reader.js';
export type { GgufFile, GgufTensorInfo, ByteSource, GgufLimits } from './reader.js';
export { deriveModelInfo, readModelInfo } from './derive.js';
export type { ModelInfo } from './derive.js';
export { readModelInfoOffThread } from './off-thread.js';
export { GgufValueType, ggmlType, GGML_TYPE_F16, GGML_TYPE_F32 } from './types.js';
export type { GgufValue, GgufScalar, GgufScalarType, GgufArrayValue } from './types.js';
