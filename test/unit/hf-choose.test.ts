import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { choosePull, isRepoPath, parsePullSpec, quantTag, type RepoFile } from '../../src/main/core/models/hf/choose.js';
import { isRelayError } from '../../src/shared/errors.js';

const f = (path: string, size = 100): RepoFile => ({ path, size, sha256: 'a'.repeat(64) });
const repo = (...paths: string[]): RepoFile[] => paths.map((p) => f(p));
const spec = (s: string) => parsePullSpec(s);
const pick = (files: RepoFile[], s: string) => choosePull(files, spec(s));
const code = (fn: () => unknown, c: string) => assert.throws(fn, (e: unknown) => isRelayError(e, c as never));

describe('pull specs', () => {
  it('owner/repo, :QUANT, /FILE, with hf.co/ or the web address in front; anything else is refused', () => {
    assert.deepEqual(spec('bartowski/Qwen2.5-7B-Instruct-GGUF'), { repo: 'bartowski/Qwen2.5-7B-Instruct-GGUF', tag: null, file: null });
    assert.deepEqual(spec('hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q8_0'), { repo: 'bartowski/Qwen2.5-7B-Instruct-GGUF', tag: 'Q8_0', file: null });
    assert.deepEqual(spec('https://huggingface.co/unsloth/x-GGUF/Q4_K_M/x-Q4_K_M.gguf'), { repo: 'unsloth/x-GGUF', tag: null, file: 'Q4_K_M/x-Q4_K_M.gguf' });
    for (const bad of ['', 'justaname', 'a/b:', 'a/b:Q4:x', '../etc/passwd', 'a/b/../../x.gguf', 'a/b/file.bin', 'a b/c']) code(() => spec(bad), 'INVALID_REQUEST');
  });

  it('a listed path that would leave its folder is not a repository path', () => {
    for (const p of ['../x.gguf', 'a/../../x.gguf', '/abs.gguf', 'a//b.gguf', 'a\\b.gguf', './x.gguf']) assert.equal(isRepoPath(p), false, p);
    assert.equal(isRepoPath('Q4_K_M/x-Q4_K_M-00001-of-00002.gguf'), true);
  });
});

describe('choosing the files (llama.cpp -hf rule)', () => {
  const qwen = repo('Qwen-7B-Q2_K.gguf', 'Qwen-7B-Q4_K_M.gguf', 'Qwen-7B-Q8_0.gguf', 'Qwen-7B-f16.gguf', 'README.md');

  it('a tag picks its file, any case; no tag: Q4_K_M; the name is repo:quant in lower case', () => {
    assert.equal(pick(qwen, 'o/Qwen-7B-GGUF:q8_0').model[0]!.path, 'Qwen-7B-Q8_0.gguf');
    const d = pick(qwen, 'o/Qwen-7B-GGUF');
    assert.equal(d.model[0]!.path, 'Qwen-7B-Q4_K_M.gguf');
    assert.equal(d.name, 'qwen-7b:q4_k_m');
    assert.equal(d.quant, 'Q4_K_M');
  });

  it('no Q4_K_M: the quantization nearest 4 bits, the larger on a tie', () => {
    assert.equal(pick(repo('m-Q2_K.gguf', 'm-Q5_K_M.gguf', 'm-Q8_0.gguf'), 'o/m').model[0]!.path, 'm-Q5_K_M.gguf');
    assert.equal(pick(repo('m-Q3_K_M.gguf', 'm-Q5_K_M.gguf'), 'o/m').model[0]!.path, 'm-Q5_K_M.gguf');
    assert.equal(pick(repo('m-f16.gguf'), 'o/m').model[0]!.path, 'm-f16.gguf');
  });

  it('a split model: the first part stands for it, every part in order; a missing part is refused', () => {
    const files = repo('Q4_K_M/big-Q4_K_M-00002-of-00003.gguf', 'Q4_K_M/big-Q4_K_M-00001-of-00003.gguf', 'Q4_K_M/big-Q4_K_M-00003-of-00003.gguf', 'big-Q8_0.gguf');
    assert.deepEqual(
      pick(files, 'o/big').model.map((x) => x.path),
      ['Q4_K_M/big-Q4_K_M-00001-of-00003.gguf', 'Q4_K_M/big-Q4_K_M-00002-of-00003.gguf', 'Q4_K_M/big-Q4_K_M-00003-of-00003.gguf'],
    );
    code(
      () =>
        pick(
          files.filter((x) => !x.path.includes('00002')),
          'o/big',
        ),
      'HF_NO_GGUF',
    );
  });

  it("a vision model's projector: in its folder or above, the quantization nearest the model's", () => {
    const files = repo('gemma-Q4_K_M.gguf', 'gemma-Q8_0.gguf', 'mmproj-gemma-f16.gguf', 'mmproj-gemma-Q8_0.gguf', 'other/mmproj-x-Q4_0.gguf');
    assert.equal(pick(files, 'o/gemma:Q8_0').projector?.path, 'mmproj-gemma-Q8_0.gguf');
    assert.equal(pick(files, 'o/gemma').projector?.path, 'mmproj-gemma-Q8_0.gguf', '8 bits is nearer 4 than 16');
    assert.equal(pick(repo('m-Q4_K_M.gguf'), 'o/m').projector, null);
    assert.equal(pick(repo('m-Q4_K_M.gguf', 'mmproj-m-f16.gguf', 'imatrix.gguf'), 'o/m').model.length, 1, 'projectors and imatrix files are not models');
  });

  it('errors: no GGUF, a quantization it does not have (listing those it has), several matches (listing them), a file not there', () => {
    code(() => pick(repo('README.md', 'model.safetensors'), 'o/m'), 'HF_NO_GGUF');
    assert.throws(
      () => pick(qwen, 'o/q:Q5_K_M'),
      (e: unknown) => isRelayError(e, 'HF_QUANT_NOT_FOUND') && (e.details.available as string[]).join() === 'Q2_K,Q4_K_M,Q8_0,f16',
    );
    assert.throws(
      () => pick(repo('a/m-Q4_K_M.gguf', 'b/m-Q4_K_M.gguf'), 'o/m'),
      (e: unknown) => isRelayError(e, 'HF_AMBIGUOUS') && (e.details.choices as string[]).length === 2,
    );
    code(() => pick(qwen, 'o/q/Qwen-7B-Q5_K_M.gguf'), 'HF_FILE_NOT_FOUND');
    code(() => pick(repo('m-Q4_K_M.gguf', 'mmproj-m-f16.gguf'), 'o/m/mmproj-m-f16.gguf'), 'INVALID_REQUEST');
  });

  it("a hostile listing's paths that leave the folder are ignored", () => {
    assert.equal(pick(repo('../../evil-Q4_K_M.gguf', 'ok-Q8_0.gguf'), 'o/m').model[0]!.path, 'ok-Q8_0.gguf');
  });

  it('quantization tags read from file names', () => {
    assert.equal(quantTag('Qwen2.5-7B-Instruct-Q4_K_M.gguf'), 'Q4_K_M');
    assert.equal(quantTag('model.Q8_0.gguf'), 'Q8_0');
    assert.equal(quantTag('big-IQ2_XXS-00001-of-00004.gguf'), 'IQ2_XXS');
    assert.equal(quantTag('tiny-BF16.gguf'), 'BF16');
    assert.equal(quantTag('model.gguf'), '');
  });
});
