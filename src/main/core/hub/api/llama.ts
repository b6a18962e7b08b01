import { OPENAI_ERRORS } from '../http/errors.js';
import { type DialectRoute, bad, completion, messages, model, nonNegInt, stream, text } from './dialect.js';

/** llama-server's own routes: rerank, its completion, infill for editors, the tokenizer helpers. */
export const LLAMA_ROUTES: readonly DialectRoute[] = [
  // Reranking, for models registered as rerankers (their replicas run with --reranking).
  ...['/v1/rerank', '/v1/reranking'].map((path): DialectRoute => ({
    path,
    upstream: '/v1/rerank',
    endpoint: 'rerank',
    use: 'rerank',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      text(b, 'query');
      if (!Array.isArray(b.documents) || b.documents.length === 0 || !b.documents.every((d) => typeof d === 'string')) bad('"documents" must be a non-empty array of strings');
      return name;
    },
  })),
  // llama-server's own completion (Continue's "llama.cpp" provider), the prompt as it is.
  {
    path: '/completion',
    endpoint: 'completion',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => completion(b, 'n_predict'),
  },
  // Code completion in editors (llama.vscode, Continue's autocomplete): fill in the middle.
  {
    path: '/infill',
    endpoint: 'infill',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      if (b.input_prefix !== undefined) text(b, 'input_prefix');
      if (b.input_suffix !== undefined) text(b, 'input_suffix');
      if (b.input_prefix === undefined && b.input_suffix === undefined && b.prompt === undefined) bad('"input_prefix" and "input_suffix" (or "prompt") are what to fill between');
      stream(b);
      nonNegInt(b, 'n_predict');
      return name;
    },
  },
  // llama-server's own helpers, with a "model" field to say whose tokenizer.
  {
    path: '/tokenize',
    endpoint: 'tokenize',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      text(b, 'content');
      return name;
    },
  },
  {
    path: '/detokenize',
    endpoint: 'detokenize',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      if (!Array.isArray(b.tokens) || !b.tokens.every((t) => Number.isInteger(t))) bad('"tokens" must be an array of token ids');
      return name;
    },
  },
  {
    path: '/apply-template',
    endpoint: 'apply-template',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      messages(b);
      return name;
    },
  },
];
