import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';

const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;
const run = promisify(execFile);

/**
 * A mistyped command line (issue #53): every `relay` command answers a bad option or argument with one line naming
 * it and the command's usage, exit code 2 — never a Node.js stack trace. Each command is run as a user would (the
 * `relay` bin), with nothing listening where a hub would be: the arguments are refused before anything is asked.
 */
const CASES: { argv: string[]; says: RegExp }[] = [
  { argv: ['hub', '--bogus'], says: /^relay hub: unknown option '--bogus'$/ },
  { argv: ['hub', '--port', 'abc'], says: /^relay hub: --port must be an integer, got "abc"$/ },
  { argv: ['up', '--bogus'], says: /^relay up: unknown option '--bogus'$/ },
  { argv: ['up', '--cache-budget-mb', 'lots'], says: /^relay up: --cache-budget-mb must be a whole number/ },
  { argv: ['up', '--schedule', 'someday'], says: /^relay up: .*someday/ },
  { argv: ['hub', '--schedule', 'someday'], says: /^relay hub: .*someday/ },
  { argv: ['hub', '--backend', 'abacus'], says: /^relay hub: unknown backend "abacus"/ },
  { argv: ['keys', 'create', 'x', '--bogus'], says: /^relay keys: unknown option '--bogus'$/ },
  { argv: ['keys'], says: /^relay keys: say what to do with keys$/ },
  { argv: ['models', 'set', 'm', '--ctx', 'abc'], says: /^relay models: --ctx must be an integer, got "abc"$/ },
  { argv: ['models', 'set'], says: /^relay models: set needs the model's NAME and a setting$/ },
  { argv: ['models', 'add'], says: /^relay models: add needs the FILE to register$/ },
  { argv: ['models', 'rm'], says: /^relay models: rm needs the model's NAME$/ },
  { argv: ['models', 'pull'], says: /^relay models: pull needs OWNER\/REPO/ },
  { argv: ['models', 'ls', '--bogus'], says: /^relay models: unknown option '--bogus'$/ },
  { argv: ['models', 'frobnicate'], says: /^relay models: no models command "frobnicate"$/ },
  { argv: ['nodes', 'revoke'], says: /^relay nodes: revoke needs the node's NAME$/ },
  { argv: ['nodes', 'frobnicate'], says: /^relay nodes: no nodes command "frobnicate"$/ },
  { argv: ['nodes', 'ls', '--bogus'], says: /^relay nodes: unknown option '--bogus'$/ },
  { argv: ['dashboard', '--bogus'], says: /^relay dashboard: unknown option '--bogus'$/ },
  { argv: ['status', 'extra'], says: /^relay status: unexpected argument 'extra'$/ },
  { argv: ['pause', '--bogus'], says: /^relay pause: unknown option '--bogus'$/ },
  { argv: ['resume', '--bogus'], says: /^relay resume: unknown option '--bogus'$/ },
  { argv: ['cache'], says: /^relay cache: say ls or prune$/ },
  { argv: ['cache', 'ls', '--bogus'], says: /^relay cache: unknown option '--bogus'$/ },
  { argv: ['llama', 'build', '--backend', 'nope'], says: /^relay llama: unknown backend "nope"/ },
  { argv: ['doctor', '--backend', 'nope'], says: /^relay doctor: unknown backend "nope"/ },
];

describe('a mistyped relay command line', () => {
  const env = { ...process.env, RELAY_HUB_URL: 'http://127.0.0.1:9', RELAY_HOME: mkdtempSync(join(tmpdir(), 'relay-cli-')), HOME: mkdtempSync(join(tmpdir(), 'relay-home-')) };
  for (const c of CASES) {
    it(`relay ${c.argv.join(' ')}: one line, the usage, exit 2`, async () => {
      const r = await run(process.execPath, [relayBin, ...c.argv], { env, timeout: 30_000 }).then(
        (x) => ({ code: 0, ...x }),
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
      assert.equal(r.code, 2, r.stderr);
      const lines = r.stderr.trimEnd().split('\n');
      assert.match(lines[0]!, c.says);
      assert.equal(lines[1], 'usage:');
      const cmd = c.argv[0]!;
      assert.ok(
        lines.slice(2).some((l) => l.startsWith(`  relay ${cmd === 'resume' ? 'pause' : cmd}`)),
        `its usage:\n${r.stderr}`,
      );
      assert.ok(!/^\s+at /m.test(r.stderr) && !r.stderr.includes('TypeError'), 'no stack trace');
      assert.equal(r.stdout, '', 'nothing else said');
    });
  }
});
