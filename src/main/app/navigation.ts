/**
 * Where the tray app's window may go, pure: the app's own pages (file:// under its pages folder) and the
 * configured hub's dashboard (same origin), nothing else; links a page opens in a new window go to the user's
 * browser, and only when they are http(s). A page that was tricked into navigating (an injected link, a
 * redirect) therefore never runs in the window that holds the IPC bridge.
 */
export function navigationAllowed(url: string, pagesUrl: string, dashboardUrl: string | null): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (u.protocol === 'file:') return url.startsWith(pagesUrl) && !decodeURIComponent(u.pathname).split('/').includes('..');
  if (!dashboardUrl) return false;
  try {
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === new URL(dashboardUrl).origin;
  } catch {
    return false;
  }
}

/** Whether a URL may be handed to the user's browser (shell.openExternal). */
export function externalAllowed(url: string): boolean {
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/**
 * Which windows may call which IPC channel: the app's own pages (file://) may call all of them; the
 * dashboard's origin (this hub, or the hub a node joined, possibly another machine) may read the state,
 * pause and open the dashboard, but never re-point this machine at another hub or change what it lends.
 */
export function ipcSenderAllowed(channel: string, senderUrl: string, pagesUrl: string, dashboardUrl: string | null): boolean {
  if (senderUrl.startsWith(pagesUrl)) return true;
  if (channel === 'relay:setup' || channel === 'relay:get-settings' || channel === 'relay:save-settings') return false;
  if (!dashboardUrl) return false;
  try {
    return new URL(senderUrl).origin === new URL(dashboardUrl).origin;
  } catch {
    return false;
  }
}
