import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * Which local process holds the other end of a loopback TCP connection (Linux: /proc/net/tcp names the socket's
 * inode, /proc/<pid>/fd links name the inodes a process holds). The hub's rpc bridges accept only their own
 * shard head's connections: any other local user reaching a bridge would get raw ggml-rpc — memory-unsafe by
 * llama.cpp's own warning — into every member node of the shard.
 */

/** `127.0.0.1:port` as /proc/net/tcp writes it (little-endian hex address, big-endian hex port); IPv4-mapped in tcp6. */
function procAddr(port: number, v6: boolean): string {
  const p = port.toString(16).toUpperCase().padStart(4, '0');
  return v6 ? `0000000000000000FFFF00000100007F:${p}` : `0100007F:${p}`;
}

/** The inode of the socket whose local port is `localPort` and remote port `remotePort` (both on 127.0.0.1). */
export function socketInode(localPort: number, remotePort: number): string | null {
  for (const [table, v6] of [
    ['/proc/net/tcp', false],
    ['/proc/net/tcp6', true],
  ] as const) {
    let rows: string[];
    try {
      rows = readFileSync(table, 'utf8').trim().split('\n').slice(1);
    } catch {
      continue;
    }
    const local = procAddr(localPort, v6);
    const remote = procAddr(remotePort, v6);
    for (const row of rows) {
      const f = row.trim().split(/\s+/);
      if (f[1] === local && f[2] === remote) return f[9] ?? null;
    }
  }
  return null;
}

/** Whether process `pid` holds socket `inode`. */
export function processHoldsSocket(pid: number, inode: string): boolean {
  const want = `socket:[${inode}]`;
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === want) return true;
    } catch {
      /* closed meanwhile */
    }
  }
  return false;
}

/**
 * Whether the peer of an accepted loopback connection (its port `peerPort`, ours `ourPort`) is process `pid`.
 * Null where the platform cannot tell (not Linux): the caller decides what it accepts then.
 */
export function peerIsProcess(peerPort: number, ourPort: number, pid: number): boolean | null {
  if (process.platform !== 'linux') return null;
  const inode = socketInode(peerPort, ourPort);
  return inode !== null && processHoldsSocket(pid, inode);
}
