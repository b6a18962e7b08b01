export { parseGguf, readGgufFile, metaValue, bufferSource, DEFAULT_GGUF_LIMITS } from './reader.js';
export type { GgufFile, GgufTensorInfo, ByteSource, GgufLimits } from './reader.js';
export { deriveModelInfo, readModelInfo } from './derive.js';
export type { ModelInfo } from './derive.js';
export { readModelFilesOffThread } from './off-thread.js';
export { readModelFiles, splitName, splitPartName, MAX_SPLIT_PARTS } from './split.js';
export type { ModelFiles } from './split.js';
export { GgufValueType, ggmlType, GGML_TYPE_F16, GGML_TYPE_F32 } from './types.js';
export type { GgufValue, GgufScalar, GgufScalarType, GgufArrayValue } from './types.js';
