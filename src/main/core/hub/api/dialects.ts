import type { DialectRoute } from './dialect.js';
import { ANTHROPIC_ROUTES } from './anthropic.js';
import { LLAMA_ROUTES } from './llama.js';
import { OPENAI_ROUTES } from './openai.js';
import { RESPONSES_ROUTES } from './responses.js';

/**
 * Every route the hub answers ahead of express (v1-door.ts), one line per dialect: a new dialect llama-server
 * speaks is a file of routes (dialect.ts says what a route is) and a line here. A dialect it does not speak
 * translates both ways in its own folder and mounts on express (ollama/, in app.ts's list).
 */
export const DIALECT_ROUTES: readonly DialectRoute[] = [...OPENAI_ROUTES, ...RESPONSES_ROUTES, ...ANTHROPIC_ROUTES, ...LLAMA_ROUTES];
