import { findLlama, type LlamaInstall } from '../../src/main/core/llama/index.js';
import { ensureFixture, type FixtureName } from '../fixtures/models.js';

/**
 * The llama.cpp build the suite runs against. `npm test`'s pretest step (test/setup/global-setup.ts) builds it
 * or finds it cached, so a missing build here is a broken setup, not a reason to skip.
 */
export function llama(): LlamaInstall & { vocabDir: string; ggufPyDir: string } {
  const install = findLlama();
  if (!install) throw new Error('llama.cpp is not built: run `npm test` (its pretest builds it) or `npx relay llama build`');
  if (!install.vocabDir || !install.ggufPyDir) {
    throw new Error('the suite needs relay\'s own build (vocab GGUFs and gguf-py come with it): unset RELAY_LLAMA_BIN_DIR');
  }
  return { ...install, vocabDir: install.vocabDir, ggufPyDir: install.ggufPyDir };
}

export function fixture(name: FixtureName, seed = 1): string {
  return ensureFixture(name, { vocabDir: llama().vocabDir, seed });
}
