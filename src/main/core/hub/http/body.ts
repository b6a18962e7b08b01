import type { ServerResponse } from 'node:http';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { fmtMb } from '../../scheduler/decide/fit.js';
import type { V1Request } from './request.js';

/**
 * The request body as one Buffer on `req.body`, at most `limit` bytes (413 payload_too_large, checked against
 * Content-Length before reading when it is given). What express.raw did, without its content-type and
 * decoding machinery: the /v1 path reads a few hundred bytes of JSON per request, and those layers cost a
 * measurable part of the hub's added time-to-first-token. A client that goes away mid-body is dropped.
 */
export function readBody(limit: number) {
  const tooLarge = (): RelayError => new RelayError(ErrorCode.PAYLOAD_TOO_LARGE, `the request body is larger than ${fmtMb(limit / 1024 / 1024)} (${limit} bytes)`);
  return (req: V1Request, res: ServerResponse, next: (err?: unknown) => void): void => {
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (declared > limit) return next(tooLarge());
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      if (err) return next(err);
      req.body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
      next();
    };
    const onData = (c: Buffer): void => {
      size += c.byteLength;
      if (size > limit) {
        finish(tooLarge());
        req.resume(); // drain the rest; the answer says why
        return;
      }
      chunks.push(c);
    };
    const onEnd = (): void => finish();
    const onError = (): void => {
      done = true;
      res.destroy();
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
  };
}
