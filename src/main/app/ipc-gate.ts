import { isRelayError } from '../../shared/errors.js';
import { IPC_CHANNELS, validateIpc, type IpcChannel, type IpcResult } from '../../shared/ipc.js';

/**
 * One IPC call from a window, checked before it runs: a known channel, a sender allowed to call it, a payload
 * of the channel's shape. Never throws: failures come back as a coded result (relay's own errors keep their
 * stable code, e.g. NODE_AUTH for a refused join token; anything else is FAILED).
 */
export async function gateIpc(
  channel: string,
  payload: unknown,
  senderUrl: string,
  allowed: (ch: IpcChannel, senderUrl: string) => boolean,
  run: (ch: IpcChannel, payload: unknown) => Promise<unknown>,
): Promise<IpcResult<unknown>> {
  if (!(IPC_CHANNELS as readonly string[]).includes(channel)) return { ok: false, code: 'UNKNOWN_CHANNEL', message: `no IPC channel ${channel}` };
  const ch = channel as IpcChannel;
  if (!allowed(ch, senderUrl)) return { ok: false, code: 'FORBIDDEN', message: `${senderUrl || 'an unknown page'} may not call ${ch}` };
  if (!validateIpc(ch, payload)) return { ok: false, code: 'INVALID_ARGUMENT', message: `bad payload for ${ch}` };
  try {
    return { ok: true, value: await run(ch, payload) };
  } catch (err) {
    return { ok: false, code: isRelayError(err) ? err.code : 'FAILED', message: (err as Error).message };
  }
}
