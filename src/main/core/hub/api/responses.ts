import { OPENAI_ERRORS } from '../http/errors.js';
import { type DialectRoute, model, nonNegInt, responsesInput, stream } from './dialect.js';

/** OpenAI's Responses API (Codex CLI): llama-server converts it to a chat completion and back. */
export const RESPONSES_ROUTES: readonly DialectRoute[] = [
  {
    path: '/v1/responses',
    endpoint: 'responses',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      responsesInput(b);
      stream(b);
      nonNegInt(b, 'max_output_tokens');
      return name;
    },
  },
  {
    path: '/v1/responses/input_tokens',
    endpoint: 'responses/input_tokens',
    use: 'generate',
    errors: OPENAI_ERRORS,
    validate: (b) => {
      const name = model(b);
      responsesInput(b);
      return name;
    },
  },
];
