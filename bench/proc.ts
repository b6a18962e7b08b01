/**
 * What another process (or this one: 'self') has used so far, read from /proc (Linux): the benches' per-token and
 * per-request counts of CPU, socket calls and wake-ups beside their ratios.
 */
import { readFileSync } from 'node:fs';

/** CPU time, user and system, in µs (/proc/PID/stat's utime and stime, clock ticks of USER_HZ = 100: 10 ms each). */
export function procCpu(pid: number | 'self'): { user: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(f[11]) * 10_000, system: Number(f[12]) * 10_000 };
}

/** CPU time, user + system, in ms. */
export function cpuMs(pid: number | 'self'): number {
  const c = procCpu(pid);
  return (c.user + c.system) / 1000;
}

/** Read and write syscalls so far (/proc/PID/io: Node's socket reads and writes are read/write/writev). */
export function procSyscalls(pid: number | 'self'): number {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  return Number(/syscr: (\d+)/.exec(io)![1]) + Number(/syscw: (\d+)/.exec(io)![1]);
}

/** How often the main thread went to sleep and was woken (voluntary context switches). */
export function procWakeups(pid: number | 'self'): number {
  return Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}
