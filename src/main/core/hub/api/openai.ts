import { OPENAI_ERRORS } from '../http/errors.js';
import { type DialectRoute, bad, completion, messages, model, nonNegInt, stream } from './dialect.js';

/** OpenAI's chat completions, completions and embeddings, as llama-server serves them. */
export const OPENAI_ROUTES: readonly DialectRoute[] = [
  {
    path: '/v1/chat/completions',
    endpoint: 'chat/completions',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      messages(b);
      stream(b);
      nonNegInt(b, 'max_tokens');
      return name;
    },
  },
  {
    path: '/v1/completions',
    endpoint: 'completions',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => completion(b, 'max_tokens'),
  },
  {
    path: '/v1/embeddings',
    endpoint: 'embeddings',
    use: 'embed',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      if (!(typeof b.input === 'string' || (Array.isArray(b.input) && b.input.length > 0))) bad('"input" must be a string or a non-empty array');
      return name;
    },
  },
];
