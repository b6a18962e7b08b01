/**
 * How large llama-server's saved slot state is (`/slots/{id}?action=save`: llama.cpp's state file), estimated
 * before a byte is written or fetched. One estimate for the hub (its own replicas' saves, a node's sizes checked
 * before they are fetched) and the node (its saves): a header, the token list (4 bytes a token and the server's
 * own framing), then per token its KV of every layer and its cell's position and sequence, and the recurrent state a
 * hybrid model keeps whatever the length. An upper bound: sliding-window layers are counted whole.
 */

/** The file's fixed part: magic, versions, the model's name, each layer's row sizes and types (generous). */
const FIXED_BYTES = 64 * 1024;
/** Per token beyond its KV: its id in the token list, its cell's position and sequence count. */
const PER_TOKEN_BYTES = 4 + 8;

export function slotStateBytes(tokens: number, kvBytesPerToken: number, stateBytes = 0): number {
  return FIXED_BYTES + tokens * (kvBytesPerToken + PER_TOKEN_BYTES) + stateBytes;
}
