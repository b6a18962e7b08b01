import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLlamaServer } from '../../src/main/core/llama/index.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { chat } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';
import { BUILD_OR_FETCH, releaseBuild, unpack } from '../helpers/release.js';
import { winePrefix, type WineProcess, type WinePrefix } from '../helpers/wine.js';

/**
 * The Windows release as a household member gets it: the zip `npm run release` makes, unpacked, in a fresh Wine
 * prefix set to Windows 10 with no Node.js installed. `relay.exe up` run as the dashboard's "Add a node…" shows it
 * joins a Linux hub and serves a replica whose text equals a Linux llama-server's at temperature 0; `relay.exe
 * doctor` names what it found (the shipped llama.cpp, koffi's library probe, the Vulkan loader, what it lends).
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'Tell me about the sea.';

describe('the Windows release under Wine (no Node.js installed)', { timeout: 2_400_000 }, () => {
  let wine: WinePrefix;
  let hub: HubProcess;
  let release: string;
  let work: string;
  let node: WineProcess;

  before(
    async () => {
      const build = await releaseBuild();
      work = mkdtempSync(join(tmpdir(), 'relay-winrelease-'));
      release = unpack(build.windows, work);
      wine = winePrefix();
      // What a PC runs (Wine's default reports Windows 7, where Node.js 22 refuses to start).
      const ver = await wine.run('winecfg', ['-v', 'win10'], 'winecfg', { limitMs: 120_000 });
      assert.equal(ver.code, 0, ver.output);
      hub = await startHub({ env: ENV }); // no CPU budget of its own: the model can only run on the Windows node
      await addModel(hub, { path: fixture('dense'), name: 'dense' });
    },
    { timeout: 1_800_000 },
  ); // a fresh machine cross-builds llama.cpp for Windows and builds the release first
  after(async () => {
    await wine?.close();
    await hub?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('the prefix has no Node.js and the release folder is the whole program', () => {
    const found = spawnSync('find', [wine.dir, '-iname', 'node.exe'], { encoding: 'utf8' }).stdout.trim();
    assert.equal(found, '', 'no node.exe in the prefix');
    assert.deepEqual(readdirSync(release).sort(), ['LICENSE', 'README.txt', 'app', 'llama', 'node_modules', 'relay.exe']);
  });

  it("relay.exe carries no broken signature: Node's Authenticode signature was removed before the injection", async () => {
    const { peSignature } = (await import(new URL('../../../scripts/sea.mjs', import.meta.url).href)) as { peSignature(b: Buffer): { offset: number; size: number } };
    const sig = peSignature(readFileSync(join(release, 'relay.exe')));
    assert.deepEqual([sig.offset, sig.size], [0, 0]);
    const node = (await import(new URL('../../../scripts/sea.mjs', import.meta.url).href)) as { nodeBinary(p: string, log: (l: string) => void): Promise<string> };
    assert.ok(peSignature(readFileSync(await node.nodeBinary('win32', () => undefined))).size > 0, 'the official node.exe it came from is signed');
  });

  it('relay.exe up, as "Add a node…" shows it, joins the Linux hub and serves a replica with the same text', async () => {
    const made = (await (await fetch(`${hub.url}/api/nodes/token`, { method: 'POST' })).json()) as { commands: { os: string; command: string }[] };
    const [exe, ...args] = made.commands.find((c) => c.os === 'windows')!.command.split(' ');
    assert.equal(exe, '.\\relay.exe');
    node = wine.start(join(release, 'relay.exe'), [...args, '--name', 'gaming-pc', '--cpu-budget-mb', '1000'], 'relay-up', { ...ENV, RELAY_HEARTBEAT_MS: '500' });
    let ended = false;
    void node.exited.then(() => (ended = true));
    await until(
      () => ended || /relay node gaming-pc connected to/.test(node.output()),
      (v) => v,
      180_000,
      250,
    );
    assert.ok(!ended, `relay.exe up exited:\n${node.output().slice(-3000)}`);
    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    let want: string;
    try {
      want = (await chat(direct.baseUrl, PROMPT)).text;
    } finally {
      await direct.child.terminate(5000);
    }
    assert.equal((await chat(hub.url, PROMPT, 24, 'dense')).text, want);
    const s = await hub.status();
    assert.deepEqual(
      s.replicas.map((r) => [r.node, r.state]),
      [['gaming-pc', 'ready']],
    );
    assert.equal(s.nodes.find((n) => n.name === 'gaming-pc')?.relay_version, s.relay, 'the node reports its relay version');
    assert.match(node.output(), /llama\.cpp shipped with relay/);
    assert.doesNotMatch(node.output(), BUILD_OR_FETCH);
  });

  it('relay.exe doctor names the shipped llama.cpp, the library probe through koffi, the Vulkan loader and what the node lends', async () => {
    const r = await wine.run(join(release, 'relay.exe'), ['doctor'], 'doctor', { limitMs: 180_000 });
    assert.equal(r.code, 0, r.output);
    const lines = r.output.split(/\r?\n/);
    assert.ok(
      lines.some((l) => /^llama-server {5}Z:\\.*\\llama\\llama-server\.exe {2}\(shipped with relay: nothing is built here\)$/.test(l)),
      r.output,
    );
    assert.ok(!lines.some((l) => l.startsWith('library probe')), 'koffi loaded: the libraries were tried');
    assert.ok(lines.includes('Vulkan           loader yes (vulkan-1.dll), drivers: registered in the Windows registry (the devices below tell)'), r.output);
    // `relay up` above saved its budget in the node's home (%APPDATA%\relay\node): doctor reads it.
    assert.ok(lines.includes('as a node        lends 1000 MB of RAM on its CPU (--cpu-budget-mb); no GPU relay can use'), r.output);
  });

  it("with koffi's Windows module gone, doctor names that, not a missing Vulkan loader", async () => {
    await node.stop();
    renameSync(join(release, 'node_modules', '@koromix'), join(release, 'node_modules', '@koromix.gone'));
    const r = await wine.run(join(release, 'relay.exe'), ['doctor'], 'doctor-no-koffi', { limitMs: 180_000 });
    assert.equal(r.code, 0, r.output);
    const lines = r.output.split(/\r?\n/);
    assert.ok(
      lines.some((l) => l.startsWith("library probe    failed: koffi's native module for win32-x64 did not load (")),
      r.output,
    );
    assert.ok(lines.includes('Vulkan           loader unknown (vulkan-1.dll), drivers: registered in the Windows registry (the devices below tell)'), r.output);
    assert.doesNotMatch(r.output, /loader no/);
  });
});
