/**
 * A parent process for the orphan tests: starts a real ggml-rpc-server through the supervisor, prints its
 * pid, then either waits to be killed (`wait`) or exits on its own (`exit`).
 */
import { findLlama, startRpcServer } from '../../src/main/core/llama/index.js';

const mode = process.argv[2] ?? 'wait';
const install = findLlama();
if (!install) throw new Error('llama.cpp not built');
const rpc = await startRpcServer(install);
process.stdout.write(`${JSON.stringify({ pid: rpc.child.pid, port: rpc.port })}\n`);
if (mode === 'exit') process.exit(0);
setInterval(() => undefined, 1000);
