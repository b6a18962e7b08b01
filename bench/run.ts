/** `npm run bench [-- NAME…]`: runs the named benchmarks (default: all), each printing its own table. */
const ALL = ['hub-overhead', 'tunnel', 'shard', 'scale', 'rpc-fill', 'push-large'];
const names = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ALL;
for (const n of names) {
  if (!ALL.includes(n)) throw new Error(`unknown benchmark "${n}" (${ALL.join(', ')})`);
  console.log(`\n=== bench/${n} (${new Date().toISOString()}) ===`);
  await import(`./${n}.js`);
}
