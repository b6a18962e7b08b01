/** GGUF on-disk value types (gguf.h `enum gguf_type`). */
export const GgufValueType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type GgufValueType = (typeof GgufValueType)[keyof typeof GgufValueType];

/** Fixed byte width of each scalar type; strings and arrays are variable. */
export const SCALAR_SIZE: Readonly<Record<number, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.BOOL]: 1,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
};

/** Smallest encoding of a value of each type: used to reject counts the remaining bytes cannot hold. */
export function minEncodedSize(type: number): number {
  if (type === GgufValueType.STRING) return 8;
  if (type === GgufValueType.ARRAY) return 12;
  return SCALAR_SIZE[type] ?? 1;
}

/** A scalar is a number, bigint (64-bit integers), boolean or string. */
export type GgufScalar = number | bigint | boolean | string;

export type GgufScalarType = Exclude<GgufValueType, typeof GgufValueType.ARRAY>;

export interface GgufScalarValue {
  readonly type: GgufScalarType;
  readonly value: GgufScalar;
}

/** An array's items share one scalar or string type; arrays of arrays are not loadable by llama.cpp. */
export interface GgufArrayValue {
  readonly type: typeof GgufValueType.ARRAY;
  readonly itemType: GgufScalarType;
  readonly value: GgufScalar[];
}

export type GgufValue = GgufScalarValue | GgufArrayValue;

/**
 * ggml tensor types: [id, name, block size in elements, bytes per block].
 * Read from ggml's own ggml_blck_size()/ggml_type_size() of the pinned llama.cpp build (v0.4.0).
 */
export const GGML_TYPES: readonly (readonly [number, string, number, number])[] = [
  [0, 'f32', 1, 4],
  [1, 'f16', 1, 2],
  [2, 'q4_0', 32, 18],
  [3, 'q4_1', 32, 20],
  [6, 'q5_0', 32, 22],
  [7, 'q5_1', 32, 24],
  [8, 'q8_0', 32, 34],
  [9, 'q8_1', 32, 36],
  [10, 'q2_K', 256, 84],
  [11, 'q3_K', 256, 110],
  [12, 'q4_K', 256, 144],
  [13, 'q5_K', 256, 176],
  [14, 'q6_K', 256, 210],
  [15, 'q8_K', 256, 292],
  [16, 'iq2_xxs', 256, 66],
  [17, 'iq2_xs', 256, 74],
  [18, 'iq3_xxs', 256, 98],
  [19, 'iq1_s', 256, 50],
  [20, 'iq4_nl', 32, 18],
  [21, 'iq3_s', 256, 110],
  [22, 'iq2_s', 256, 82],
  [23, 'iq4_xs', 256, 136],
  [24, 'i8', 1, 1],
  [25, 'i16', 1, 2],
  [26, 'i32', 1, 4],
  [27, 'i64', 1, 8],
  [28, 'f64', 1, 8],
  [29, 'iq1_m', 256, 56],
  [30, 'bf16', 1, 2],
  [34, 'tq1_0', 256, 54],
  [35, 'tq2_0', 256, 66],
  [39, 'mxfp4', 32, 17],
  [40, 'nvfp4', 64, 36],
  [41, 'q1_0', 128, 18],
  [42, 'q2_0', 64, 18],
];

export interface GgmlTypeInfo {
  readonly id: number;
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
}

const BY_ID = new Map<number, GgmlTypeInfo>(GGML_TYPES.map(([id, name, blockSize, typeSize]) => [id, { id, name, blockSize, typeSize }]));

export function ggmlType(id: number): GgmlTypeInfo | undefined {
  return BY_ID.get(id);
}

export const GGML_TYPE_F32 = 0;
export const GGML_TYPE_F16 = 1;
