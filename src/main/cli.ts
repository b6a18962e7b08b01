import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { isRelayError } from '../shared/errors.js';
import { BACKENDS, ensureLlama, findLlama, parseListDevices, type Backend } from './core/llama/index.js';

const USAGE = `relay — pool a household's GPUs for llama.cpp inference

Usage:
  relay llama build [--backend cpu|cuda|vulkan|metal]
                         build llama-server and ggml-rpc-server from the pinned llama.cpp source
                         (cached under ~/.cache/relay/llama.cpp/<tag>-<backend>/; a second call returns at once)
  relay doctor [--backend B]
                         print the binaries in use, the llama.cpp tag and the devices llama-server sees
  relay --version | --help

Environment:
  RELAY_LLAMA_BIN_DIR    use your own llama.cpp build (a folder holding llama-server and ggml-rpc-server)
  RELAY_CACHE_DIR        cache root (default ~/.cache/relay)
`;

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

function backendOf(v: string | undefined): Backend {
  const b = (v ?? 'cpu') as Backend;
  if (!BACKENDS.includes(b)) throw new Error(`unknown backend "${v}" (one of ${BACKENDS.join(', ')})`);
  return b;
}

async function cmdLlamaBuild(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { backend: { type: 'string' } } });
  const install = await ensureLlama({ backend: backendOf(values.backend), progress: (l) => console.error(`[llama] ${l}`) });
  console.log(`llama-server     ${install.serverPath}`);
  console.log(`ggml-rpc-server  ${install.rpcServerPath}`);
  console.log(`llama.cpp        ${install.tag} (${install.version})`);
  return 0;
}

async function cmdDoctor(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { backend: { type: 'string' } } });
  const install = findLlama({ backend: backendOf(values.backend) });
  console.log(`relay            ${packageVersion()} (node ${process.version}, ${process.platform}-${process.arch})`);
  if (!install) {
    console.log('llama.cpp        not built: run `npx relay llama build` (or set RELAY_LLAMA_BIN_DIR)');
    return 1;
  }
  console.log(`llama-server     ${install.serverPath}${install.source === 'env' ? '  (RELAY_LLAMA_BIN_DIR)' : ''}`);
  console.log(`ggml-rpc-server  ${install.rpcServerPath}`);
  console.log(`llama.cpp        ${install.tag}, backend ${install.backend}, ${install.version}`);
  const r = spawnSync(install.serverPath, ['--list-devices'], { encoding: 'utf8', timeout: 30_000 });
  const devices = parseListDevices(`${r.stdout}${r.stderr}`);
  console.log('devices          (llama-server --list-devices)');
  if (devices.length === 0) console.log('  none: CPU only (the hub serves only with an opted-in --cpu-budget-mb)');
  for (const d of devices) console.log(`  ${d.name}: ${d.description} — ${d.totalMib} MiB total, ${d.freeMib} MiB free`);
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (cmd === undefined || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(USAGE);
    return cmd === undefined ? 1 : 0;
  }
  if (cmd === '--version' || cmd === '-v') {
    console.log(packageVersion());
    return 0;
  }
  if (cmd === 'llama' && sub === 'build') return cmdLlamaBuild(rest);
  if (cmd === 'doctor') return cmdDoctor(sub === undefined ? rest : [sub, ...rest]);
  console.error(`relay: unknown command "${argv.join(' ')}"\n`);
  process.stderr.write(USAGE);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    if (isRelayError(err)) console.error(`relay: ${err.code}: ${err.message}`);
    else console.error(`relay: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 1;
  },
);
