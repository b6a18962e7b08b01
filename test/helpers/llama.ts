import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BACKEND_PACKAGES, findLlama, startLlamaServer, withBackend, type LlamaInstall } from '../../src/main/core/llama/index.js';
import { cacheRoot } from '../../src/main/core/llama/fetch.js';
import { ensureFixture, type FixtureName } from '../fixtures/models.js';
import { complete } from './openai.js';

/**
 * The llama.cpp build the suite runs against. `npm test`'s pretest step (test/setup/global-setup.ts) builds it
 * or finds it cached, so a missing build here is a broken setup, not a reason to skip.
 */
export function llama(): LlamaInstall & { vocabDir: string; ggufPyDir: string } {
  const install = findLlama();
  if (!install) throw new Error('llama.cpp is not built: run `npm test` (its pretest builds it) or `npx relay llama build`');
  if (!install.vocabDir || !install.ggufPyDir) {
    throw new Error("the suite needs relay's own build (vocab GGUFs and gguf-py come with it): unset RELAY_LLAMA_BIN_DIR");
  }
  return { ...install, vocabDir: install.vocabDir, ggufPyDir: install.ggufPyDir };
}

/** The prebuilt Vulkan module global-setup fetched (pinned, integrity-checked) into the cache. */
export function vulkanModule(): string {
  const pkg = BACKEND_PACKAGES.find((p) => p.id === 'vulkan')!;
  return join(cacheRoot(), 'llama.cpp', 'modules', `${pkg.id}-${pkg.version}`, 'libggml-vulkan.so');
}

/**
 * The environment that makes Mesa's lavapipe (a software Vulkan device, Debian's mesa-vulkan-drivers) a GPU
 * for llama.cpp: ggml-vulkan skips devices that call themselves CPUs unless they are listed by index.
 * Shaders compile once per cache dir (well over a minute on 2 cores), so the suite keeps one beside the build.
 */
export function lavapipeEnv(): Record<string, string> {
  const dir = join(cacheRoot(), 'mesa-shader-cache');
  mkdirSync(dir, { recursive: true });
  return { GGML_VK_VISIBLE_DEVICES: '0', MESA_SHADER_CACHE_DIR: dir };
}

/** The suite's build running the Vulkan module on lavapipe, as `relay hub --backend vulkan` would on a GPU. */
export function vulkanLlama(): LlamaInstall & { vocabDir: string; ggufPyDir: string } {
  const base = llama();
  const v = withBackend(base, { backend: 'vulkan', module: vulkanModule(), reason: 'the test suite (lavapipe)' });
  return { ...v, vocabDir: base.vocabDir, ggufPyDir: base.ggufPyDir, env: { ...v.env, ...lavapipeEnv() } };
}

export function fixture(name: FixtureName, seed = 1): string {
  return ensureFixture(name, { vocabDir: llama().vocabDir, seed });
}

/** The oracle: what a direct llama-server (1 slot, ctx 512, one thread) answers at temperature 0. */
export async function directTexts(model: string, prompts: readonly string[], tokens = 24): Promise<string[]> {
  const s = await startLlamaServer(llama(), { model, ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
  try {
    const out: string[] = [];
    for (const p of prompts) out.push((await complete(s.baseUrl, p, tokens)).text);
    return out;
  } finally {
    await s.child.terminate(5000);
  }
}
