import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';
import { packageVersion } from '../../src/main/core/app-files.js';
import { tokenHubUrl } from '../../src/main/core/pairing/tokens.js';

/**
 * A new machine joins. `relay nodes token` on the hub prints what to run there for each way relay is installed,
 * as "Add a node…" shows it. A machine with no GPU relay can use, joined without --cpu-budget-mb, lends nothing:
 * `relay up` says so when it starts, `relay doctor` says so, and the hub's 503 for a model names that node and the
 * flag — each with what to pass. (The suite runs every node on the CPU backend, as a machine without a GPU would.)
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

describe('joining: the command per OS; a node that lends nothing says so, with the flag to pass', { timeout: 120_000 }, () => {
  let hub: HubProcess;
  let node: NodeProcess;

  before(async () => {
    hub = await startHub({ env: ENV }); // no CPU budget either: only the node could serve
    node = await startNode(hub, { name: 'bare', env: ENV }); // no --cpu-budget-mb
    await addModel(hub, { path: fixture('dense'), name: 'dense' });
  });
  after(async () => {
    await node?.stop();
    await hub?.stop();
  });

  it('relay nodes token prints the join command for the Linux release, the Windows release and npm, the token last', () => {
    const r = spawnSync(process.execPath, [relayBin, 'nodes', 'token', '--hub', hub.url], { encoding: 'utf8', env: process.env });
    assert.equal(r.status, 0, r.stderr);
    const out = r.stdout.trim().split('\n');
    const token = out.at(-1)!;
    assert.match(token, /^rly1\./);
    assert.equal(tokenHubUrl(token), hub.url, 'asked of the running hub: the token carries its address');
    for (const command of ['./relay up --token', '.\\relay.exe up --token', `npx relay-llm@${packageVersion()} up --token`]) {
      assert.ok(out.includes(`    ${command} ${token}`), r.stdout);
    }
    assert.match(r.stdout, /Linux: in the folder unpacked from relay-[\d.]+-linux-x64\.tar\.gz:/);
  });

  it('relay up says at start that the machine lends nothing and names --cpu-budget-mb', () => {
    assert.ok(
      node.logs.some((l) => l.startsWith('relay: this machine lends nothing: no GPU relay can use and no CPU budget.') && l.includes('--cpu-budget-mb N')),
      node.logs.join('\n'),
    );
  });

  it("the hub's 503 names the node that lends nothing and the flag", async () => {
    const r = await hub.api<{ error: { code: string; message: string } }>('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'dense', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    assert.equal(r.status, 503);
    assert.equal(r.body.error.code, 'model_unavailable');
    assert.match(r.body.error.message, /nodes: bare lends nothing \(no GPU relay can use and no CPU budget: start it with relay up --cpu-budget-mb N to serve from its CPU\)/);
  });

  it("the hub owner's pause of a node outlives the node's restart (relay up again), as the tray app's does", async () => {
    const paused = await hub.api<{ availability: string }>(`/api/nodes/${node.name}/pause`, { method: 'POST' });
    assert.equal(paused.body.availability, 'paused');
    await node.stop();
    node = await startNode(hub, { name: 'bare', env: ENV, home: node.home, token: null });
    const seen = await until(
      async () => (await hub.status()).nodes.find((n) => n.name === 'bare'),
      (n) => n?.connected === true,
    );
    assert.equal(seen?.state, 'paused', JSON.stringify(seen));
    const resumed = await hub.api<{ availability: string }>(`/api/nodes/${node.name}/resume`, { method: 'POST' });
    assert.equal(resumed.body.availability, 'idle');
  });

  it('relay doctor, for that node, says it lends nothing and what to pass', () => {
    const r = spawnSync(process.execPath, [relayBin, 'doctor', '--home', node.home], { encoding: 'utf8', env: process.env });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^as a node {8}lends nothing: no GPU relay can use and no CPU budget\. To serve from this CPU, start the node with --cpu-budget-mb N/m);
  });
});
