import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cacheRoot } from '../../src/main/core/llama/fetch.js';

/**
 * The coding-agent CLIs a household points at the hub, pinned in test/agents/package.json (+ its lock) and
 * installed once per version of those two files into ~/.cache/relay/agents/<hash>/ by the suite's setup (about 1.6 GB: each ships a
 * native binary or a bundle). Only two install scripts run (package.json's allowScripts): Claude Code's and
 * opencode's, which put their platform binary (an optional dependency) in place; none downloads anything.
 */
const agentsSrc = new URL('../../../test/agents/', import.meta.url).pathname;

function agentsDir(): string {
  const hash = createHash('sha256');
  for (const f of ['package.json', 'package-lock.json']) hash.update(readFileSync(join(agentsSrc, f)));
  const key = hash.digest('hex').slice(0, 12);
  return join(cacheRoot(), 'agents', key);
}

/** Installs the pinned agents unless this lock's install is there; returns its folder. */
export function ensureAgents(progress: (line: string) => void = () => undefined): string {
  const dir = agentsDir();
  if (existsSync(join(dir, '.complete'))) return dir;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  for (const f of ['package.json', 'package-lock.json']) copyFileSync(join(agentsSrc, f), join(tmp, f));
  progress(`installing the coding agents (test/agents/package.json) into ${dir}`);
  // `npm install` with the lock, not `npm ci`: npm 11 leaves optional platform packages that are not published
  // (@teddyzhu/clipboard-darwin-arm64 …) out of a lock it writes, and `npm ci` then calls that lock out of sync.
  const r = spawnSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--loglevel', 'error'], { cwd: tmp, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) rmSync(tmp, { recursive: true, force: true });
  if (r.status !== 0) throw new Error(`npm install of the coding agents failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  writeFileSync(join(tmp, '.complete'), new Date().toISOString());
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return dir;
}

export const AGENTS = ['claude', 'codex', 'qwen', 'opencode', 'pi', 'cn'] as const;
export type Agent = (typeof AGENTS)[number];

export interface AgentRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** The final message the CLI printed for the turn (parsed from its JSON output where it has one). */
  readonly final: string;
}

export interface AgentTarget {
  /** The server's origin, `http://127.0.0.1:PORT` (each agent appends its own path: /v1, /v1/messages, …). */
  readonly origin: string;
  readonly model: string;
  /** The context the agent is told the model has. */
  readonly ctx: number;
  /** The output length the agent asks for, through its own setting (README: each agent's setting). */
  readonly maxTokens: number;
}

/**
 * Runs one agent CLI for one prompt, non-interactively, in a temp folder of its own (HOME, config and work
 * folder inside it), with every tool that writes or runs something denied, offline but for `target`.
 */
export function runAgent(agent: Agent, target: AgentTarget, prompt: string, timeoutMs = 240_000): Promise<AgentRun> {
  const bin = join(agentsDir(), 'node_modules', '.bin', agent);
  if (!existsSync(bin)) throw new Error(`${bin} is missing: the suite's setup (npm test's pretest) installs the agents`);
  const t = mkdtempSync(join(tmpdir(), `relay-agent-${agent}-`));
  const home = join(t, 'home');
  const work = join(t, 'work');
  mkdirSync(home, { recursive: true });
  mkdirSync(work, { recursive: true });
  const { args, env } = setUp(agent, target, prompt, t, home);
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI|CLAUDE|CODEX|QWEN|OPENCODE|CONTINUE|PI)_/.test(k)));
  return new Promise((resolve) => {
    execFile(bin, args, { cwd: work, env: { ...clean, HOME: home, NO_COLOR: '1', ...env }, timeout: timeoutMs, maxBuffer: 64 << 20, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
      resolve({ code, stdout, stderr, final: finalMessage(agent, stdout) });
    }).stdin?.end();
  });
}

/** Each agent's own configuration files and flags, as its documentation gives them (README's client table). */
function setUp(agent: Agent, to: AgentTarget, prompt: string, t: string, home: string): { args: string[]; env: Record<string, string> } {
  const v1 = `${to.origin}/v1`;
  const key = 'sk-relay-test';
  const json = (path: string, v: unknown) => {
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, JSON.stringify(v, null, 2));
  };
  switch (agent) {
    case 'claude':
      return {
        args: ['-p', prompt, '--output-format', 'json', '--permission-mode', 'plan', '--disallowedTools', 'Bash Edit Write NotebookEdit WebFetch WebSearch'],
        env: {
          ANTHROPIC_BASE_URL: to.origin,
          ANTHROPIC_API_KEY: key,
          ANTHROPIC_MODEL: to.model,
          ANTHROPIC_SMALL_FAST_MODEL: to.model,
          ANTHROPIC_DEFAULT_HAIKU_MODEL: to.model,
          CLAUDE_CODE_MAX_OUTPUT_TOKENS: String(to.maxTokens),
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
          DISABLE_AUTOUPDATER: '1',
        },
      };
    case 'codex': {
      const codexHome = join(t, 'codex');
      mkdirSync(codexHome, { recursive: true });
      writeFileSync(
        join(codexHome, 'config.toml'),
        [
          `model = "${to.model}"`,
          'model_provider = "relay"',
          `model_context_window = ${to.ctx}`,
          `model_max_output_tokens = ${to.maxTokens}`,
          '[model_providers.relay]',
          'name = "relay"',
          `base_url = "${v1}"`,
          'wire_api = "responses"',
          'env_key = "RELAY_KEY"',
          'request_max_retries = 0',
          'stream_max_retries = 0',
          '',
        ].join('\n'),
      );
      return { args: ['exec', '--skip-git-repo-check', '--sandbox', 'read-only', prompt], env: { CODEX_HOME: codexHome, RELAY_KEY: key } };
    }
    case 'qwen':
      json(join(home, '.qwen', 'settings.json'), {
        security: { auth: { selectedType: 'openai' } },
        model: { name: to.model },
        modelProviders: {
          openai: [
            {
              id: to.model,
              name: to.model,
              baseUrl: v1,
              envKey: 'RELAY_KEY',
              generationConfig: { maxRetries: 0, timeout: 120_000, contextWindowSize: to.ctx, samplingParams: { max_tokens: to.maxTokens } },
            },
          ],
        },
        general: { enableAutoUpdate: false, chatRecording: false },
        memory: { enableManagedAutoMemory: false },
        privacy: { usageStatisticsEnabled: false },
        telemetry: { enabled: false },
        permissions: { deny: ['run_shell_command', 'write_file', 'edit', 'web_fetch', 'web_search', 'agent'] },
      });
      return { args: ['-p', prompt, '--approval-mode', 'plan', '--max-wall-time', '200s', '-o', 'json'], env: { RELAY_KEY: key } };
    case 'opencode':
      json(join(home, '.config', 'opencode', 'opencode.json'), {
        autoupdate: false,
        share: 'disabled',
        model: `local/${to.model}`,
        small_model: `local/${to.model}`,
        provider: {
          local: {
            npm: '@ai-sdk/openai-compatible',
            options: { baseURL: v1, apiKey: key, timeout: 120_000 },
            models: { [to.model]: { limit: { context: to.ctx, output: to.maxTokens } } },
          },
        },
        permission: { '*': 'deny', read: 'allow', glob: 'allow', grep: 'allow', external_directory: 'deny' },
      });
      return {
        args: ['run', '--pure', '--title', 'relay test', prompt],
        env: {
          XDG_CONFIG_HOME: join(home, '.config'),
          XDG_DATA_HOME: join(home, '.local', 'share'),
          XDG_CACHE_HOME: join(home, '.cache'),
          XDG_STATE_HOME: join(home, '.local', 'state'),
          OPENCODE_DISABLE_AUTOUPDATE: '1',
          OPENCODE_DISABLE_MODELS_FETCH: '1',
          OPENCODE_DISABLE_CLAUDE_CODE: '1',
        },
      };
    case 'pi': {
      const dir = join(t, 'pi');
      json(join(dir, 'models.json'), {
        providers: {
          local: {
            baseUrl: v1,
            api: 'openai-completions',
            apiKey: key,
            compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsStore: false, maxTokensField: 'max_tokens' },
            models: [{ id: to.model, contextWindow: to.ctx, maxTokens: to.maxTokens }],
          },
        },
      });
      json(join(dir, 'settings.json'), { compaction: { enabled: false }, retry: { maxRetries: 0 } });
      return {
        args: [
          '-p',
          '--provider',
          'local',
          '--model',
          to.model,
          '--no-session',
          '--no-context-files',
          '--no-extensions',
          '--no-skills',
          '--no-prompt-templates',
          '--no-themes',
          '--thinking',
          'off',
          prompt,
        ],
        env: { PI_CODING_AGENT_DIR: dir, PI_OFFLINE: '1' },
      };
    }
    case 'cn': {
      const config = join(t, 'continue.yaml');
      writeFileSync(
        config,
        [
          'name: relay',
          'version: 1.0.0',
          'schema: v1',
          'models:',
          `  - name: ${to.model}`,
          '    provider: openai',
          `    model: ${to.model}`,
          `    apiBase: ${v1}/`,
          `    apiKey: ${key}`,
          '    roles: [chat]',
          '    defaultCompletionOptions:',
          `      contextLength: ${to.ctx}`,
          `      maxTokens: ${to.maxTokens}`,
          '',
        ].join('\n'),
      );
      return {
        args: ['-p', prompt, '--config', config, '--exclude', '*'],
        env: { CONTINUE_GLOBAL_DIR: join(t, 'continue'), FORCE_NO_TTY: 'true', CONTINUE_CLI_AUTO_UPDATED: 'true', CONTINUE_METRICS_ENABLED: '0' },
      };
    }
  }
}

/** What the CLI printed as the turn's answer. */
function finalMessage(agent: Agent, stdout: string): string {
  const plain = stdout.replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*[A-Za-z]`, 'g'), ''); // ANSI colours
  try {
    if (agent === 'claude') {
      const j = JSON.parse(plain) as { result?: string; is_error?: boolean };
      return j.is_error ? '' : (j.result ?? '');
    }
    if (agent === 'qwen') {
      const events = JSON.parse(plain) as { type: string; result?: string; is_error?: boolean }[];
      const r = events.find((e) => e.type === 'result');
      return r && !r.is_error ? (r.result ?? '') : '';
    }
  } catch {
    return '';
  }
  return plain.trim();
}
