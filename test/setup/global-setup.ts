/**
 * Runs once before the suite (npm's pretest): builds or finds llama-server and ggml-rpc-server, fetches the
 * prebuilt Vulkan module (lavapipe stands in for a GPU), then generates every fixture model into the fixture
 * cache, so test files only read them.
 */
import { BACKEND_PACKAGES, ensureLlama, ensurePackageModule, listDevicesWith } from '../../src/main/core/llama/index.js';
import { ensureFixture, FIXTURES, type FixtureName } from '../fixtures/models.js';
import { ensureAgents } from '../helpers/agents.js';
import { lavapipeEnv } from '../helpers/llama.js';

const progress = (l: string): void => console.error(`[llama] ${l}`);
const install = await ensureLlama({ backend: 'cpu', progress });
console.error(`[setup] llama.cpp ${install.tag} at ${install.binDir}`);
if (!install.vocabDir) throw new Error("the suite needs relay's own build: unset RELAY_LLAMA_BIN_DIR");
const vulkan = await ensurePackageModule(
  BACKEND_PACKAGES.find((p) => p.id === 'vulkan')!,
  process.env,
  progress,
);
const listed = listDevicesWith(install.serverPath, vulkan, { ...process.env, ...lavapipeEnv() });
if (!listed.devices.some((d) => d.name === 'Vulkan0')) {
  throw new Error(`the Vulkan module lists no Vulkan0 on lavapipe (is mesa-vulkan-drivers installed? scripts/install-deps.sh):\n${listed.output}`);
}
console.error(`[setup] vulkan module ${vulkan}: ${listed.devices.map((d) => `${d.name} ${d.description}`).join(', ')}`);
for (const name of Object.keys(FIXTURES) as FixtureName[]) {
  const path = ensureFixture(name, { vocabDir: install.vocabDir });
  console.error(`[setup] fixture ${name}: ${path}`);
}
// The coding-agent CLIs test/e2e/agents.test.ts runs (pinned in test/agents; cached by the hash of their lock).
console.error(`[setup] coding agents: ${ensureAgents((l) => console.error(`[agents] ${l}`))}`);
