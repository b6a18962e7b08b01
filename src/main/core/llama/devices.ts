/** One line of `llama-server --list-devices`: `  NAME: description (TOTAL MiB, FREE MiB free)`. */
export interface ListedDevice {
  readonly name: string;
  readonly description: string;
  readonly totalMib: number;
  readonly freeMib: number;
}

const LINE = /^\s+([^\s:]+):\s+(.*?)\s+\((\d+) MiB,\s+(\d+) MiB free\)\s*$/;

/** Parse the device list; lines that are not devices (headers, logs, `(none)`) are ignored. */
export function parseListDevices(output: string): ListedDevice[] {
  const out: ListedDevice[] = [];
  let inList = false;
  for (const line of output.split(/\r?\n/)) {
    if (line.startsWith('Available devices:')) {
      inList = true;
      continue;
    }
    if (!inList) continue;
    const m = LINE.exec(line);
    if (m) out.push({ name: m[1]!, description: m[2]!, totalMib: Number(m[3]), freeMib: Number(m[4]) });
  }
  return out;
}
