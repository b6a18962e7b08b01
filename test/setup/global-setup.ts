/**
 * Runs once before the suite (npm's pretest): builds or finds llama-server and ggml-rpc-server, then
 * generates every fixture model into the fixture cache, so test files only read them.
 */
import { ensureLlama } from '../../src/main/core/llama/index.js';
import { ensureFixture, FIXTURES, type FixtureName } from '../fixtures/models.js';

const install = await ensureLlama({ progress: (l) => console.error(`[llama] ${l}`) });
console.error(`[setup] llama.cpp ${install.tag} at ${install.binDir}`);
if (!install.vocabDir) throw new Error('the suite needs relay\'s own build: unset RELAY_LLAMA_BIN_DIR');
for (const name of Object.keys(FIXTURES) as FixtureName[]) {
  const path = ensureFixture(name, { vocabDir: install.vocabDir });
  console.error(`[setup] fixture ${name}: ${path}`);
}
