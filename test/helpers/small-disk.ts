import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';

/**
 * A real small filesystem at `dir` (a tmpfs of `mb` MiB; these machines run the suite as root), for what
 * depends on free space: statfs there tells the truth, and a write past it fails with ENOSPC. Returns the unmount.
 */
export function mountSmallDisk(dir: string, mb: number): () => void {
  mkdirSync(dir, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    throw new Error(`mounting a ${mb} MiB tmpfs at ${dir} needs root (the suite runs as root on these machines): ${(err as { stderr?: Buffer }).stderr?.toString() ?? String(err)}`, { cause: err });
  }
  return () => execFileSync('umount', [dir], { stdio: 'pipe' });
}
