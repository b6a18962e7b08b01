import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { ensureLlama, findLlama, installDir, LLAMA_SOURCE } from '../../src/main/core/llama/index.js';
import { llama } from '../helpers/llama.js';

const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;

describe('llama.cpp install', () => {
  it('the cached build is where the docs say, keyed by tag and backend', () => {
    const i = llama();
    assert.equal(i.source, 'cache');
    assert.equal(i.tag, LLAMA_SOURCE.tag);
    assert.equal(i.binDir, join(installDir('cpu'), 'bin'));
    assert.match(i.version, /commit [0-9a-f]+/);
  });

  it('a second ensureLlama returns the cached build without building anything', async () => {
    const lines: string[] = [];
    const i = await ensureLlama({ progress: (l) => lines.push(l) });
    assert.equal(i.binDir, llama().binDir);
    assert.deepEqual(lines, []);
  });

  it('honours RELAY_LLAMA_BIN_DIR (a user\'s own build) and refuses one without the binaries', () => {
    const own = findLlama({ env: { ...process.env, RELAY_LLAMA_BIN_DIR: llama().binDir } });
    assert.equal(own?.source, 'env');
    assert.equal(own?.backend, 'custom');
    assert.equal(own?.version, llama().version);
    const empty = mkdtempSync(join(tmpdir(), 'relay-bin-'));
    assert.throws(() => findLlama({ env: { ...process.env, RELAY_LLAMA_BIN_DIR: empty } }), (e: unknown) => isRelayError(e, 'LLAMA_NOT_FOUND'));
  });

  it('finds nothing in an empty cache (then `relay llama build` or the hub builds it)', () => {
    assert.equal(findLlama({ env: { ...process.env, RELAY_CACHE_DIR: mkdtempSync(join(tmpdir(), 'relay-cache-')) } }), null);
  });
});

describe('relay CLI', () => {
  it('`relay doctor` prints the binaries in use, the llama.cpp tag and the devices', async () => {
    const { stdout } = await run(process.execPath, [relay, 'doctor']);
    assert.match(stdout, new RegExp(`llama-server\\s+${llama().serverPath}`));
    assert.match(stdout, new RegExp(`ggml-rpc-server\\s+${llama().rpcServerPath}`));
    assert.match(stdout, new RegExp(`llama.cpp\\s+${LLAMA_SOURCE.tag.replace(/\./g, '\\.')}`));
    assert.match(stdout, /devices\s+\(llama-server --list-devices\)\n\s+none: CPU only/);
  });

  it('`relay llama build` returns the cached build at once', async () => {
    const { stdout } = await run(process.execPath, [relay, 'llama', 'build']);
    assert.match(stdout, new RegExp(`llama-server\\s+${llama().serverPath}`));
  });

  it('`relay doctor` with no build says how to get one and exits 1', async () => {
    const env = { ...process.env, RELAY_CACHE_DIR: mkdtempSync(join(tmpdir(), 'relay-cache-')) };
    await assert.rejects(run(process.execPath, [relay, 'doctor'], { env }), (e: { code: number; stdout: string }) => e.code === 1 && /relay llama build/.test(e.stdout));
  });

  it('an unknown command or backend is a clear error, not a stack trace', async () => {
    await assert.rejects(run(process.execPath, [relay, 'frobnicate']), (e: { code: number; stderr: string }) => e.code === 2 && /unknown command/.test(e.stderr));
    await assert.rejects(run(process.execPath, [relay, 'llama', 'build', '--backend', 'tpu']), (e: { code: number; stderr: string }) => e.code === 1 && /unknown backend "tpu"/.test(e.stderr));
  });
});

describe('npm start', () => {
  it('without Electron\'s binary says so and starts the headless hub', async () => {
    const { spawn } = await import('node:child_process');
    const { createInterface } = await import('node:readline');
    const start = new URL('../../../scripts/start.js', import.meta.url).pathname;
    const home = mkdtempSync(join(tmpdir(), 'relay-start-'));
    const p = spawn(process.execPath, [start, '--port', '0', '--home', home], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    const served = await new Promise<string>((resolve, reject) => {
      createInterface({ input: p.stdout! }).on('line', (l) => { if (/\/v1\s+http/.test(l)) resolve(l); });
      p.once('exit', (code) => reject(new Error(`start exited ${code}: ${err}`)));
    });
    assert.match(served, /http:\/\/127\.0\.0\.1:\d+\/v1/);
    assert.match(err, /Electron's binary is not installed here/);
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  });
});
