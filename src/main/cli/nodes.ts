import { UsageError } from './usage.js';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { packageName } from '../core/app-files.js';
import { packageVersion } from '../core/hub/index.js';
import { hubJoinToken } from '../core/pairing/tokens.js';
import { joinCommands, type JoinCommand } from '../core/pairing/join-commands.js';
import { api, apiFailure, hubUrl } from './api.js';

/** `relay nodes token | ls | revoke`: the hub's side of the machines that join it (`relay up` is node.ts). */
export async function cmdNodes(sub: string | undefined, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { home: { type: 'string' }, hub: { type: 'string' }, json: { type: 'boolean' } } });
  if (sub === 'token') {
    // From the running hub, as "Add a node…" makes it (the token carries the address nodes reach it at); with
    // --home, minted offline from the hub's data dir (the hub need not run; the commands then name --hub).
    let made: { token: string; commands: JoinCommand[]; expires_at?: string; note?: string | null };
    if (values.home) {
      const token = hubJoinToken(resolve(values.home));
      made = { token, commands: joinCommands(token, { version: packageVersion(), npmName: packageName() }, 'http://HUB-ADDRESS:7070') };
    } else {
      const res = await api(hubUrl(values.hub), '/api/nodes/token', { method: 'POST' });
      const j = (await res.json()) as Partial<typeof made> & { token: string; command?: string; error?: { code: string; message: string } };
      if (!res.ok) return apiFailure(j);
      // A hub of relay 0.1.0 answers one `command` (for a checkout) instead of one per way of installing.
      made = { ...j, commands: j.commands ?? [{ os: 'npm', where: 'With this repository checked out', command: j.command ?? '' }] };
    }
    console.log(`Join token (valid 24 h, usable once${made.expires_at ? `, until ${made.expires_at}` : ''}). On the new machine run the line for how relay is installed there:`);
    for (const c of made.commands) console.log(`  ${c.where}:\n    ${c.command}`);
    if (made.note) console.log(`Note: ${made.note}`);
    console.log(made.token);
    return 0;
  }
  const base = hubUrl(values.hub);
  if (sub === 'ls') {
    const res = await api(base, '/api/nodes');
    const j = (await res.json()) as {
      nodes?: { name: string; state: string; reason: string | null; devices: { id: string; free_mb: number; total_mb: number }[]; last_seen: string | null; replicas: unknown[] }[];
      error?: { code: string; message: string };
    };
    if (!res.ok || !j.nodes) return apiFailure(j);
    if (values.json) {
      console.log(JSON.stringify(j.nodes, null, 2));
      return 0;
    }
    if (j.nodes.length === 0) console.log('no nodes (relay nodes token, then relay up on another machine)');
    for (const n of j.nodes) {
      const devs = n.devices.map((d) => `${d.id} ${d.free_mb}/${d.total_mb} MB`).join(', ') || '-';
      console.log(`${n.name.padEnd(16)} ${n.state.padEnd(8)} ${devs}  replicas ${n.replicas.length}  last seen ${n.last_seen ?? 'never'}${n.reason ? `  (${n.reason})` : ''}`);
    }
    return 0;
  }
  if (sub === 'revoke') {
    const name = positionals[0];
    if (!name) throw new UsageError("revoke needs the node's NAME");
    const res = await api(base, `/api/nodes/${encodeURIComponent(name)}/revoke`, { method: 'POST' });
    const j = (await res.json()) as { revoked?: string; error?: { code: string; message: string } };
    if (!res.ok) return apiFailure(j);
    console.log(`revoked: ${j.revoked}`);
    return 0;
  }
  throw new UsageError(sub === undefined ? 'say token, ls or revoke' : `no nodes command "${sub}"`);
}
