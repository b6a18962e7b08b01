import { ErrorCode, RelayError, isRelayError } from '../../../shared/errors.js';
import { llamaServerArgv, rpcServerArgv, type LlamaServerOptions } from './argv.js';
import { installEnv, type LlamaInstall } from './install.js';
import { freePort } from './ports.js';
import { spawnChild, type ManagedChild } from './supervisor.js';

export interface RunningLlamaServer {
  readonly child: ManagedChild;
  readonly baseUrl: string;
  readonly port: number;
  readonly argv: readonly string[];
}

type ServerOpts = Omit<LlamaServerOptions, 'host' | 'port'> & {
  readonly name?: string;
  readonly readyTimeoutMs?: number;
  readonly env?: NodeJS.ProcessEnv;
  readonly onLine?: (line: string) => void;
  /** The process exists (it is loading): the caller can stop it before it is ready. Called once per spawn. */
  readonly onSpawn?: (child: ManagedChild) => void;
};

/**
 * Start llama-server on 127.0.0.1 and an ephemeral port; resolves once /health answers 200. A load that does not
 * finish within `readyTimeoutMs` (its deadline) is LOAD_TIMEOUT; a failed start rejects only once the process
 * has exited, so whatever it held (memory on a GPU) is free when the caller hears of it.
 */
export async function startLlamaServer(install: LlamaInstall, opts: ServerOpts): Promise<RunningLlamaServer> {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const argv = llamaServerArgv({ logVerbosity: 4, ...opts, host: '127.0.0.1', port });
    const child = spawnChild({
      name: opts.name ?? 'llama-server',
      command: install.serverPath,
      args: argv,
      // The backend module (GGML_BACKEND_PATH) comes with the install; a caller's env cannot drop it.
      env: installEnv(install, opts.env),
      readiness: { kind: 'http', url: `http://127.0.0.1:${port}/health` },
      readyTimeoutMs: opts.readyTimeoutMs ?? 180_000,
      onLine: opts.onLine,
    });
    opts.onSpawn?.(child);
    try {
      await child.ready;
      return { child, baseUrl: `http://127.0.0.1:${port}`, port, argv };
    } catch (err) {
      await child.terminate(2000);
      // Another process can take the port between freePort() and bind(): retry that case only.
      if (attempt < 3 && child.output().some((l) => /couldn't bind|address already in use/i.test(l))) continue;
      if (isRelayError(err, ErrorCode.CHILD_READY_TIMEOUT)) {
        const s = Math.round((opts.readyTimeoutMs ?? 180_000) / 1000);
        throw new RelayError(ErrorCode.LOAD_TIMEOUT, `${opts.name ?? 'llama-server'} did not finish loading within its deadline of ${s} s\n--- last output ---\n${child.tail()}`, {
          ...err.details,
          deadline_ms: opts.readyTimeoutMs ?? 180_000,
        });
      }
      throw err;
    }
  }
}

export interface RunningRpcServer {
  readonly child: ManagedChild;
  readonly port: number;
  readonly endpoint: string;
}

/** Start ggml-rpc-server bound to 127.0.0.1 only. `cacheDir` becomes LLAMA_CACHE (the tensor cache is under it). */
export async function startRpcServer(
  install: LlamaInstall,
  opts: { cache?: boolean; cacheDir?: string; threads?: number; name?: string; env?: NodeJS.ProcessEnv; device?: string | undefined } = {},
): Promise<RunningRpcServer> {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const env = { ...installEnv(install, opts.env), ...(opts.cacheDir ? { LLAMA_CACHE: opts.cacheDir } : {}) };
    const child = spawnChild({
      name: opts.name ?? `ggml-rpc-server:${port}`,
      command: install.rpcServerPath,
      args: rpcServerArgv({ host: '127.0.0.1', port, cache: opts.cache ?? false, threads: opts.threads, device: opts.device }),
      env,
      readiness: { kind: 'tcp', host: '127.0.0.1', port },
      readyTimeoutMs: 30_000,
    });
    try {
      await child.ready;
      return { child, port, endpoint: `127.0.0.1:${port}` };
    } catch (err) {
      await child.terminate(2000);
      if (attempt < 3 && child.output().some((l) => /bind|address already in use/i.test(l))) continue;
      throw err;
    }
  }
}
