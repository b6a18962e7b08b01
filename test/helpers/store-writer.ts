import { Store } from '../../src/main/core/store/store.js';

/**
 * A process that joins nodes into a hub store as fast as it can and prints each name once its update has
 * resolved (committed: a hub would now answer the join). test/chaos/store-crash.test.ts kills it with SIGKILL
 * at random moments. Usage: node store-writer.js HOME
 */
process.stdout.write(`pid ${process.pid}\n`);
const store = await Store.open(process.argv[2]!);
if (store.recovered !== null) process.stdout.write(`recovered ${store.recovered}\n`);
for (let i = store.data.nodes.length; ; i++) {
  const name = `n${i}`;
  await store.update((d) => {
    d.nodes.push({ name, credential_sha256: 'c'.repeat(64), created_at: new Date().toISOString(), revoked_at: null, last_seen: null });
    (d.used_join_tokens ??= []).push(`t${i}`);
  });
  process.stdout.write(`${name}\n`);
}
