import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { hubConfigFromEnv, processEnv, type HubConfig } from '../core/config.js';
import { packageVersion, startHub } from '../core/hub/index.js';
import { ensureLlama, terminateAll } from '../core/llama/index.js';
import { createLogger, logStrayRejections } from '../core/log.js';
import { backendOf, logInstall } from './llama.js';
import { intFlag, scheduleFlag } from './api.js';
import { llamaBuildProgress, showHubPushes, TerminalProgress } from './progress.js';

/** `relay hub`: build or find llama.cpp, start the hub, print where it serves, stop on SIGINT / SIGTERM. */
export async function cmdHub(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: 'string' },
      listen: { type: 'string' },
      home: { type: 'string' },
      'cpu-budget-mb': { type: 'string' },
      'keep-alive-ms': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      backend: { type: 'string' },
      schedule: { type: 'string' },
      'auto-pause': { type: 'boolean' },
      'allowed-hosts': { type: 'string' },
      'ollama-port': { type: 'string' },
    },
  });
  scheduleFlag(values.schedule); // a bad schedule is refused before anything else
  const backend = backendOf(values.backend);
  const env = processEnv();
  const overrides: Partial<HubConfig> = {
    tlsCertPath: values['tls-cert'] ? resolve(values['tls-cert']) : undefined,
    tlsKeyPath: values['tls-key'] ? resolve(values['tls-key']) : undefined,
    port: intFlag(values.port, '--port'),
    host: values.listen,
    home: values.home ? resolve(values.home) : undefined,
    cpuBudgetMb: intFlag(values['cpu-budget-mb'], '--cpu-budget-mb'),
    keepAliveMs: intFlag(values['keep-alive-ms'], '--keep-alive-ms'),
    hubSchedule: values.schedule,
    hubAutoPause: values['auto-pause'],
    ollamaPort: intFlag(values['ollama-port'], '--ollama-port'),
  };
  const config = hubConfigFromEnv(env, overrides, values['allowed-hosts']);
  const log = createLogger({ name: 'hub' });
  logStrayRejections(log);
  const terminal = new TerminalProgress(process.stderr, (l) => log.info(l));
  const install = await ensureLlama({ backend, progress: llamaBuildProgress(terminal) });
  logInstall(log, install);
  const hub = await startHub(config, { log, install });
  if (terminal.tty) showHubPushes(terminal, () => hub.nodes.pushes.values());
  console.log(`relay hub ${packageVersion()} is serving`);
  console.log(`  /v1        ${hub.url}/v1`);
  if (hub.ollamaUrl) console.log(`  ollama     ${hub.ollamaUrl}  (the Ollama API; also at ${hub.url}/api)`);
  console.log(`  dashboard  ${hub.url}/`);
  console.log(`  store      ${hub.store.path}`);
  if (config.host === '0.0.0.0' || config.host === '::') console.log(`  listening on all interfaces (port ${hub.port})`);
  await new Promise<void>((done) => {
    const stop = (sig: string): void => {
      log.info({ signal: sig }, 'shutting down');
      void hub.close().then(done, done);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  await terminateAll(5000);
  return 0;
}
