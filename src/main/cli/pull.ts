import { UsageError } from './usage.js';
import type { PullView } from '../../shared/status.js';
import { api, apiFailure } from './api.js';
import { TerminalProgress } from './progress.js';

/**
 * `relay models pull REPO[:QUANT|/FILE] [--name N]`: the hub downloads from Hugging Face (it is the one machine
 * that fetches from the internet); this command starts the pull and draws its progress until the model is
 * registered. Ctrl-C stops the download and keeps what came: the same command again resumes it.
 */
export async function cmdPull(base: string, spec: string | undefined, name: string | undefined): Promise<number> {
  if (!spec) throw new UsageError('pull needs OWNER/REPO[:QUANT] or OWNER/REPO/FILE.gguf (e.g. bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M)');
  const res = await api(base, '/api/models/pull', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: spec, name }) });
  const j = (await res.json()) as { pull?: PullView; error?: { code: string; message: string } };
  if (!res.ok || !j.pull) return apiFailure(j);
  let pull = j.pull;
  const files = pull.files.map((f) => `${f.path} (${(f.size / 1e6).toFixed(1)} MB)`).join(', ');
  console.log(`pulling ${pull.repo} @ ${pull.commit.slice(0, 12)} as "${pull.name}": ${files}`);
  const progress = new TerminalProgress(process.stderr, (l) => console.error(l));
  let interrupted = false;
  const onSigint = (): void => {
    interrupted = true;
  };
  process.once('SIGINT', onSigint);
  try {
    while (pull.state === 'downloading' || pull.state === 'registering') {
      if (interrupted) {
        await api(base, `/api/pulls/${pull.id}?keep=1`, { method: 'DELETE' });
        progress.finish(pull.id, 'stopped: what came is kept, the same command again resumes it');
        return 130;
      }
      progress.update(pull.id, pull.name, pull.done_bytes, pull.total_bytes, 'bytes');
      await new Promise((r) => setTimeout(r, 500));
      const r = await api(base, `/api/pulls/${pull.id}`);
      const k = (await r.json()) as { pull?: PullView; error?: { code: string; message: string } };
      if (!r.ok || !k.pull) return apiFailure(k);
      pull = k.pull;
    }
  } finally {
    process.off('SIGINT', onSigint);
  }
  if (pull.state !== 'done') {
    progress.finish(pull.id, `pull ${pull.state}`);
    return apiFailure({ error: pull.error ?? { code: pull.state, message: `the pull was ${pull.state}` } });
  }
  progress.finish(pull.id);
  console.log(`registered: ${pull.name}${pull.projector ? ` (with its projector ${pull.projector})` : ''}: POST /v1/chat/completions with "model": "${pull.name}"`);
  return 0;
}
