/** `relay --help`: every command and the environment it reads. */
export const USAGE = `relay — pool a household's GPUs for llama.cpp inference

Usage:
  relay hub [--port 7070] [--listen 127.0.0.1] [--home DIR] [--cpu-budget-mb N] [--keep-alive-ms MS]
            [--tls-cert FILE --tls-key FILE] [--backend auto|cpu|cuda|vulkan|metal]
            [--schedule "mon-fri 09:00-17:30"] [--auto-pause]   (when the hub's own devices are paused)
            [--allowed-hosts desktop.lan,…]   (names besides its own, its addresses and <hostname>.local)
            [--ollama-port 11434]   (the same API on Ollama's port too, for apps that only look there)
                         run the hub: OpenAI-compatible /v1, Anthropic's /v1/messages, the Ollama API at
                         /api/chat …, dashboard at /, admin API at /api
  relay models add FILE [--name NAME] [--required-vram-mb N] [--embedding | --reranker] [--mmproj FILE|none] [--hub URL]
                   [--ctx N] [--slots N] [--kv f16|q8_0|q4_0] [--flash-attn on|off|auto]
  relay models set NAME [--ctx N] [--slots N] [--kv …] [--flash-attn …] [--max-tokens N] [--spec auto|none|draft|mtp|ngram|ngram-TYPE] [--mmproj FILE|none] [--draft MODEL|none] [--draft-max N] [--draft-min N]   ("default": the pool's value)
                         a model's own context per slot, parallel slots, KV cache type, flash attention
  relay models ls [--hub URL]
  relay models import ollama|lmstudio|DIR [--hub URL] [--json] [--ctx N] [--slots N] [--kv …] [--flash-attn …]
                         register the GGUFs already on the hub machine (Ollama's store: OLLAMA_MODELS or
                         its default; LM Studio's models folder; any folder), under readable names
  relay models rm NAME [--hub URL]
                         manage the running hub's registry (it hashes and reads the GGUF header)
  relay status [--hub URL] [--json]
                         the pool at a glance: the hub, nodes, devices, placements, models, pushes, backoffs
  relay dashboard [--link [--read-only]] [--hub URL]
                         the dashboard's URL; --link: a one-time login link for a browser on another machine
  relay keys create NAME [--priority interactive|background] [--max-tokens-per-day N] [--max-concurrent N] [--hub URL]
  relay keys set NAME [--priority …] [--max-tokens-per-day N|none] [--max-concurrent N|none]
  relay keys ls [--json] | revoke NAME
                         API keys for /v1 (a hub listening beyond loopback requires one); the key is printed once.
                         A background key's requests wait behind interactive ones and give their slots up to them;
                         ls shows each key's rules and its tokens today and this month
  relay nodes token [--hub URL | --home HUB_DIR]
                         a join token for a new machine and the command to run there (Linux, Windows, npm);
                         the token is the last line. --home: minted offline from the hub's data dir
  relay nodes ls | revoke NAME [--hub URL]
  relay up [--hub URL] --token T [--name N] [--home DIR] [--cpu-budget-mb N] [--cache-budget-mb N|auto]
         [--schedule "mon-fri 09:00-17:30"] [--auto-pause] [--backend auto|cpu|cuda|vulkan|metal]
                         run a node: dial out to the hub and lend this machine's device
  relay cache ls | prune [--home NODE_DIR] [--json]
                         a node's weights cache: files, sizes, last use, budget / remove what no replica uses
  relay pause | resume [--home NODE_DIR]
                         stop sharing (the hub releases this machine's GPU within 30 s) / share again
  relay pause | resume --hub [--hub-url URL]
                         the same for the hub's own devices: its placements stop, requests go to nodes
  relay llama build [--backend cuda|vulkan|metal] [--windows]
                         build llama-server and ggml-rpc-server from the pinned llama.cpp source (cached
                         under ~/.cache/relay/llama.cpp/<tag>-shared/; a second call returns at once); with
                         --backend, also that GPU module, with your local toolkit (preferred to a prebuilt one);
                         --windows: cross-build the Windows x64 binaries with mingw-w64 (<tag>-win64/)
  relay doctor [--backend auto|cpu|cuda|vulkan|metal] [--home NODE_DIR]
                         what this machine has (NVIDIA driver, CUDA runtime, Vulkan), the backend relay uses
                         and why, the devices llama-server sees, what a node here lends, and whether
                         auto-pause can work here
  relay --version | --help

Environment (see README for all):
  RELAY_HOME             hub data dir (the JSON store); default the platform's user data dir
  RELAY_HUB_URL          hub for \`relay models\` (default http://127.0.0.1:7070)
  RELAY_KV_CACHE_TYPE    f16 | q8_0 | q4_0          RELAY_CONTEXT_SIZE, RELAY_REPLICA_CTX, RELAY_PARALLEL_SLOTS
  RELAY_FLASH_ATTN       on | off | auto            RELAY_API_KEY, RELAY_ADMIN_TOKEN
  RELAY_LLAMA_BACKEND    auto (default) | cpu | cuda | vulkan | metal: the GPU backend (--backend wins)
  RELAY_LLAMA_BIN_DIR    use your own llama.cpp build (a folder holding llama-server and ggml-rpc-server)
  RELAY_CACHE_DIR        cache root (default ~/.cache/relay)
  RELAY_QUEUE_MAX        requests that may wait per model (64; one more: 429 pool_busy), RELAY_QUEUE_TIMEOUT_MS
  RELAY_MAX_PLACEMENTS_PER_MODEL   placements one model may have at once (0 = as many as the devices hold)
`;

/** A command given a bad option or argument: `relay` prints this line and the command's usage, and exits 2. */
export class UsageError extends Error {}

/** The lines of USAGE for `cmd` (each line that starts `relay <cmd>` and the lines that explain it). */
export function usageOf(cmd: string): string {
  const out: string[] = [];
  let mine = false;
  for (const line of USAGE.split('\n')) {
    if (/^ {2}relay /.test(line)) mine = line.startsWith(`  relay ${cmd}`) || (cmd === 'resume' && line.startsWith('  relay pause'));
    else if (!line.startsWith('    ')) mine = false;
    if (mine) out.push(line);
  }
  return out.join('\n');
}

/**
 * What `relay` says of an error a command threw for its arguments (node:util's parseArgs, or a UsageError): one line
 * naming the problem and the command's usage; null for any other error.
 */
export function usageAnswer(cmd: string, err: unknown): string | null {
  const parse = err instanceof TypeError && String((err as NodeJS.ErrnoException).code).startsWith('ERR_PARSE_ARGS_');
  if (!parse && !(err instanceof UsageError)) return null;
  // parseArgs says more after its first sentence (how to pass a value that starts with a dash): the sentence is enough.
  const first = err.message.split(/\.\s/)[0]!.replace(/\.$/, '');
  return `relay ${cmd}: ${first.charAt(0).toLowerCase()}${first.slice(1)}\nusage:\n${usageOf(cmd) || USAGE}\n`;
}
