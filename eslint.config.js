// ESLint (flat config), type-aware through typescript-eslint. `npm run lint` runs it with Prettier's check;
// .ci/run runs lint before the tests.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'release/', '.dist-llama/', 'resources/', 'assets/', 'test/oracle/', 'test/interop/*.go'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked.map((c) => ({ ...c, files: ['**/*.ts', '**/*.cts'] })),
  {
    files: ['**/*.ts', '**/*.cts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // The house style: `void promise` marks a deliberate fire-and-forget; everything else is awaited.
      // node:test's describe/it return promises the runner awaits itself.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          ignoreVoid: true,
          allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'before', 'after', 'beforeEach', 'afterEach'] }],
        },
      ],
      // Unused names are tsc's job (noUnusedLocals); a leading _ marks a deliberately ignored argument.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Parsed JSON and test doubles are typed at the boundary with a cast, checked by validators (protocol.ts).
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      // Handlers passed to node:http, express and EventEmitter may be async; their errors are handled inside.
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      // Interface methods are called through their objects; relay passes no method references that need `this`.
      '@typescript-eslint/unbound-method': 'off',
      // Empty catch blocks carry a comment saying why the error does not matter.
      'no-empty': ['error', { allowEmptyCatch: true }],
      // One import statement per module (a type-only import beside it is fine).
      'no-duplicate-imports': ['error', { allowSeparateTypeImports: true }],
    },
  },
  {
    // Test doubles implement async interfaces without awaiting anything.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/require-await': 'off' },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        require: 'readonly',
        module: 'readonly',
        __dirname: 'readonly',
      },
    },
  },
  {
    // The dashboard's own scripts: classic browser scripts whose functions the page calls (type-checked with the
    // page by scripts/check-renderer.mjs, which knows the browser's globals).
    files: ['src/renderer/ui/*.js'],
    languageOptions: { sourceType: 'script', globals: { document: 'readonly', window: 'readonly' } },
    rules: { 'no-unused-vars': ['error', { varsIgnorePattern: '^(esc|drawPool|placementDetails|machineDetails|record|mergeHistory|spark|lineChart|usageBars)$' }] },
  },
);
