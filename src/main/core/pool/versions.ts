import type { Hello } from '../../../shared/protocol.js';
import type { NodeRefusal } from '../store/store.js';

/**
 * Whether the hub can work with a node, from its hello, pure. What must be the same on both sides: the tunnel
 * protocol, and the llama.cpp build (ggml RPC between a shard's stages needs the same one; each relay release
 * ships one). The relay versions say which side to update. A node the hub cannot work with is refused at hello with
 * `version_mismatch` and this text, shown on the dashboard, never a cryptic failure later.
 */
export interface Refusal {
  /** Who should update: the node (it is older), the hub (the node is newer), or neither (same relay, another llama.cpp). */
  readonly update: 'node' | 'hub' | 'build';
  /** The short line for the dashboard: "update this node to relay 0.2.0". */
  readonly summary: string;
  readonly message: string;
  /** The node's relay version; null for relay 0.1.0 and older, whose hello carries none. */
  readonly nodeRelay: string | null;
  readonly hubRelay: string;
}

/**
 * Semantic Versioning's precedence (semver.org §11): x.y.z in numeric order; of the same x.y.z a pre-release
 * (`-rc.1`) comes first; pre-releases compare field by field (split at dots), numbers as numbers and before any
 * word, words in ASCII order, and more fields after equal ones come later (`rc.9` < `rc.10` < `rc.10.1`); build
 * metadata (`+…`) is no part of it.
 */
export function compareVersions(a: string, b: string): number {
  const split = (v: string): { nums: number[]; pre: string[] | null } => {
    const noBuild = v.split('+')[0]!;
    const dash = noBuild.indexOf('-');
    const core = dash < 0 ? noBuild : noBuild.slice(0, dash);
    return { nums: core.split('.').map((x) => Number.parseInt(x, 10) || 0), pre: dash < 0 ? null : noBuild.slice(dash + 1).split('.') };
  };
  const [x, y] = [split(a), split(b)];
  for (let i = 0; i < Math.max(x.nums.length, y.nums.length); i++) {
    const d = (x.nums[i] ?? 0) - (y.nums[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  if (x.pre === null || y.pre === null) return x.pre === y.pre ? 0 : x.pre === null ? 1 : -1;
  for (let i = 0; i < Math.max(x.pre.length, y.pre.length); i++) {
    const [p, q] = [x.pre[i], y.pre[i]];
    if (p === undefined || q === undefined) return p === undefined ? -1 : 1;
    const [pn, qn] = [/^\d+$/.test(p), /^\d+$/.test(q)];
    if (pn && qn) {
      const d = Number(p) - Number(q);
      if (d !== 0) return Math.sign(d);
    } else if (pn !== qn) return pn ? -1 : 1;
    else if (p !== q) return p < q ? -1 : 1;
  }
  return 0;
}

export function refusal(hub: { protocol: number; llama: string; relay: string }, hello: Pick<Hello, 'protocol' | 'llama' | 'relay'>): Refusal | null {
  const protocol = hello.protocol !== hub.protocol;
  if (!protocol && hello.llama === hub.llama) return null;
  const nodeRelay = hello.relay ?? null;
  const order = nodeRelay === null ? -1 : compareVersions(nodeRelay, hub.relay);
  const update = order < 0 ? 'node' : order > 0 ? 'hub' : 'build';
  const summary =
    update === 'node'
      ? `update this node to relay ${hub.relay}`
      : update === 'hub'
        ? `update the hub to relay ${nodeRelay}`
        : protocol
          ? 'run the same relay build on both'
          : "run relay's own llama.cpp on both (RELAY_LLAMA_BIN_DIR points one side at another build)";
  const what = protocol
    ? `the tunnel protocol differs (hub ${hub.protocol}, node ${hello.protocol})`
    : `the llama.cpp builds differ and ggml RPC needs the same one (hub "${hub.llama}", node "${hello.llama}")`;
  const message = `${summary}: the node runs ${nodeRelay === null ? 'relay 0.1.0 or older' : `relay ${nodeRelay}`}, the hub relay ${hub.relay}; ${what}`;
  return { update, summary, message, nodeRelay, hubRelay: hub.relay };
}

/** A refusal as the store keeps it on the node's record and /status shows it (`at`: when). */
export function refusalRecord(r: Refusal, at: string): NodeRefusal {
  return { code: 'version_mismatch', update: r.update, summary: r.summary, message: r.message, node_relay: r.nodeRelay, hub_relay: r.hubRelay, at };
}
