import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareVersions, refusal } from '../../src/main/core/pool/versions.js';
import { joinCommands } from '../../src/main/core/pairing/join-commands.js';
import { parseNodeMessage } from '../../src/shared/protocol-validate.js';
import { PROTOCOL_VERSION } from '../../src/shared/protocol.js';

/** Versions meet (pool/versions.ts) and what a new machine runs to join (pairing/join-commands.ts): pure, as text. */
const HUB = { protocol: 1, llama: 'version: 1 (80fb11a)', relay: '0.2.0' };

describe('versions: which nodes the hub works with, and who updates', () => {
  it('orders x.y.z numerically', () => {
    assert.deepEqual(
      [
        ['0.2.0', '0.10.0'],
        ['1.0.0', '0.9.9'],
        ['0.2.0', '0.2.0-rc.1'],
        ['0.2.0-rc.1', '0.2.0-rc.2'],
        ['0.2', '0.2.0'],
      ].map(([a, b]) => compareVersions(a!, b!)),
      [-1, 1, 1, -1, 0],
    );
  });

  it("orders pre-releases by semver's rules: fields numerically, numbers before words, more fields later; build metadata aside", () => {
    // Each pair as semver.org §11 orders them: the first before the second.
    const before = [
      ['0.3.0-rc.9', '0.3.0-rc.10'],
      ['0.3.0-rc.10', '0.3.0-rc.10.1'],
      ['0.3.0-alpha', '0.3.0-alpha.1'],
      ['0.3.0-alpha.1', '0.3.0-alpha.beta'],
      ['0.3.0-alpha.beta', '0.3.0-beta'],
      ['0.3.0-beta.2', '0.3.0-beta.11'],
      ['0.3.0-beta.11', '0.3.0-rc.1'],
      ['0.3.0-rc.1', '0.3.0'],
      ['0.3.0', '0.3.1-rc.1'],
    ];
    for (const [a, b] of before) {
      assert.equal(compareVersions(a!, b!), -1, `${a} < ${b}`);
      assert.equal(compareVersions(b!, a!), 1, `${b} > ${a}`);
    }
    assert.equal(compareVersions('0.3.0-rc.1+build.5', '0.3.0-rc.1+build.7'), 0);
    assert.equal(compareVersions('0.3.0+linux', '0.3.0'), 0);
    // The side to update, between two release candidates.
    assert.equal(refusal({ ...HUB, relay: '0.3.0-rc.10' }, { protocol: 2, llama: HUB.llama, relay: '0.3.0-rc.9' })?.update, 'node');
  });

  it('the same protocol and llama.cpp build work together whatever the relay versions (an older hello carries none)', () => {
    for (const relay of [undefined, '0.1.0', '0.2.0', '0.3.1']) assert.equal(refusal(HUB, { protocol: 1, llama: HUB.llama, relay }), null);
  });

  it('refuses another llama.cpp build or protocol and names the side to update', () => {
    const table = [
      [{ protocol: 1, llama: 'version: 0 (aaaaaaa)' }, 'node', 'update this node to relay 0.2.0', 'the node runs relay 0.1.0 or older'],
      [{ protocol: 1, llama: 'version: 0 (aaaaaaa)', relay: '0.1.5' }, 'node', 'update this node to relay 0.2.0', 'the node runs relay 0.1.5'],
      [{ protocol: 2, llama: 'version: 2 (bbbbbbb)', relay: '0.3.0' }, 'hub', 'update the hub to relay 0.3.0', 'the tunnel protocol differs (hub 1, node 2)'],
      [{ protocol: 1, llama: 'my own build', relay: '0.2.0' }, 'build', "run relay's own llama.cpp on both (RELAY_LLAMA_BIN_DIR points one side at another build)", 'node "my own build"'],
    ] as const;
    for (const [hello, update, summary, part] of table) {
      const r = refusal(HUB, hello)!;
      assert.deepEqual([r.update, r.summary], [update, summary], JSON.stringify(hello));
      assert.ok(r.message.startsWith(`${summary}: `) && r.message.includes(part), r.message);
    }
  });

  it("a hello of another protocol is judged by the fields every version keeps; this version's hello needs all of its own", () => {
    const head = { type: 'hello', protocol: PROTOCOL_VERSION + 1, node: 'n', llama: 'x', relay: '9.0.0' };
    assert.equal(parseNodeMessage(JSON.stringify(head)).ok, true);
    assert.equal(parseNodeMessage(JSON.stringify({ ...head, protocol: PROTOCOL_VERSION })).ok, false);
    assert.equal(parseNodeMessage(JSON.stringify({ ...head, relay: 9 })).ok, false);
  });
});

describe('join commands: one line per way relay is installed', () => {
  it("the portable releases (Linux, Windows) and npm at the hub's version; the token carries the address", () => {
    assert.deepEqual(
      joinCommands('rly1.T.M', { version: '0.2.0', npmName: 'relay-llm' }).map((c) => [c.os, c.command]),
      [
        ['linux', './relay up --token rly1.T.M'],
        ['windows', '.\\relay.exe up --token rly1.T.M'],
        ['npm', 'npx relay-llm@0.2.0 up --token rly1.T.M'],
      ],
    );
    assert.match(joinCommands('t', { version: '0.2.0', npmName: 'relay-llm' })[1]!.where, /relay-0\.2\.0-win-x64\.zip/);
  });

  it('a token minted offline (no address in it) gets --hub', () => {
    assert.equal(joinCommands('t', { version: '0.2.0', npmName: 'relay-llm' }, 'http://<this hub>:7070')[0]!.command, './relay up --hub http://<this hub>:7070 --token t');
  });
});
