/**
 * The tray app's controller in a process of its own, as Electron's main process runs it, with a shell that
 * prints what the tray would show as JSON lines on stdout. Used to test what happens to the app's children
 * when that process quits (SIGTERM → stop, like the before-quit handler) or crashes (SIGKILL).
 *   node app-host.js <userData> <pagesUrl>
 */
import { AppController } from '../../src/main/app/controller.js';
import { trayIcon, statusLine } from '../../src/main/app/tray-menu.js';
import { createLogger } from '../../src/main/core/log.js';

const [userData, pagesUrl] = process.argv.slice(2);
if (!userData || !pagesUrl) throw new Error('usage: app-host <userData> <pagesUrl>');

const say = (o: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
const controller = new AppController({
  userData,
  pagesUrl,
  log: createLogger({ name: 'app-host', pretty: false }),
  defaults: { hubPort: 0, cpuBudgetMb: Number(process.env.RELAY_TEST_CPU_BUDGET_MB ?? 0) },
  shell: {
    openWindow: (target) => say({ window: target }),
    setLoginItem: (open) => say({ loginItem: open }),
    quit: () => void controller.stop().then(() => process.exit(0)),
    render: (s) => say({ icon: trayIcon(s), status: statusLine(s), hub: s.hub?.url ?? null }),
  },
});
process.once('SIGTERM', () => controller.onTray('quit'));
await controller.start();
say({ started: true });
