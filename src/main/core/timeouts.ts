/**
 * Timeouts that depend on each other across the hub and the node. Each says which invariant ties it to
 * the others; change them together.
 */

/** A llama-server or ggml-rpc-server gets this long after SIGTERM before SIGKILL (the node, the hub). */
export const CHILD_STOP_GRACE_MS = 10_000;

/**
 * The hub waits this long for a node's answer to stop-replica: the node's SIGTERM grace, plus a SIGKILL and
 * a tunnel round trip on a busy link. Must exceed CHILD_STOP_GRACE_MS.
 */
export const STOP_REPLICA_WAIT_MS = CHILD_STOP_GRACE_MS + 25_000;

/**
 * The hub waits this long for set-paused: the node stops its replicas and rpc-servers, each within
 * CHILD_STOP_GRACE_MS, in parallel. Must exceed STOP_REPLICA_WAIT_MS; a pause is promised within 30 s of the
 * owner's click on the node itself, which the node meets on its own whatever the hub waits.
 */
export const SET_PAUSED_WAIT_MS = STOP_REPLICA_WAIT_MS + 5_000;
