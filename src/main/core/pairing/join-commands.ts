/**
 * What to run on a new machine to join this hub with `token` (it carries the hub's address): one line per way of
 * installing relay — the portable release for Linux and for Windows (one download, nothing else installed), and
 * npm for a machine that has Node. The dashboard's "Add a node…", the hub tray's and `relay nodes token` show
 * these; pure, so they are tested as text.
 */
export interface JoinCommand {
  readonly os: 'linux' | 'windows' | 'npm';
  /** Where to run it, for a person reading the panel. */
  readonly where: string;
  readonly command: string;
}

/** `hubUrl`: only for a token that does not carry the hub's address (one minted offline by `relay nodes token --home`). */
export function joinCommands(token: string, release: { version: string; npmName: string }, hubUrl?: string): JoinCommand[] {
  const args = `up ${hubUrl ? `--hub ${hubUrl} ` : ''}--token ${token}`;
  return [
    { os: 'linux', where: `Linux: in the folder unpacked from relay-${release.version}-linux-x64.tar.gz`, command: `./relay ${args}` },
    { os: 'windows', where: `Windows: in the folder unpacked from relay-${release.version}-win-x64.zip (Command Prompt or PowerShell)`, command: `.\\relay.exe ${args}` },
    // The hub's own version: a node of another relay version may be refused (hello compares them).
    { os: 'npm', where: 'Any machine with Node 20.12 or newer (npm)', command: `npx ${release.npmName}@${release.version} ${args}` },
  ];
}
