/** Module hook: `electron` resolves to the stand-in beside this file (see ./electron.ts). */
const standIn = new URL('./electron.js', import.meta.url).href;

export async function resolve(specifier: string, context: unknown, next: (s: string, c: unknown) => Promise<unknown>): Promise<unknown> {
  if (specifier === 'electron') return { url: standIn, shortCircuit: true };
  return next(specifier, context);
}
