import { createHash, generateKeyPairSync, randomBytes, sign, X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The hub's own certificate for its nodes: a self-signed ECDSA P-256 certificate made at the hub's first start
 * (RELAY_HOME/tls/), whose SHA-256 fingerprint travels in every join token. A node pins it: it accepts exactly
 * that certificate and refuses any other before it sends its token or credential. No CA, no hostname: the
 * fingerprint is the identity. Node's crypto signs but does not build certificates, so the DER is built here.
 */

// ---- a little DER ----
function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}
const tlv = (tag: number, body: Buffer): Buffer => Buffer.concat([Buffer.from([tag]), len(body.length), body]);
const seq = (...items: Buffer[]): Buffer => tlv(0x30, Buffer.concat(items));
const set = (...items: Buffer[]): Buffer => tlv(0x31, Buffer.concat(items));
function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number);
  const out = [a! * 40 + b!];
  for (const n of rest) {
    const chunk = [n & 0x7f];
    for (let v = n >>> 7; v > 0; v >>>= 7) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}
/** A non-negative INTEGER in DER's minimal form: no leading zero byte unless the next byte's top bit is set. */
export function derInteger(b: Buffer): Buffer {
  let i = 0;
  while (i < b.length - 1 && b[i] === 0) i++;
  const trimmed = b.subarray(i);
  const body = trimmed[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed;
  return tlv(0x02, body);
}
const integer = derInteger;
function utcTime(d: Date): Buffer {
  const p = (n: number): string => String(n).padStart(2, '0');
  const s = `${p(d.getUTCFullYear() % 100)}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}Z`;
  return tlv(0x17, Buffer.from(s, 'latin1'));
}
const ECDSA_SHA256 = seq(oid('1.2.840.10045.4.3.2'));
const name = (cn: string): Buffer => seq(set(seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(cn, 'utf8')))));

/** A self-signed certificate (PEM) and its key (PKCS#8 PEM), valid from yesterday for `years`. */
export function selfSignedCert(cn = 'relay hub', years = 10, now = new Date(), serial = randomBytes(16)): { cert: string; key: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const from = new Date(now.getTime() - 24 * 3600_000);
  const to = new Date(now.getTime());
  to.setUTCFullYear(Math.min(to.getUTCFullYear() + years, 2049)); // UTCTime ends in 2049
  const tbs = seq(
    tlv(0xa0, integer(Buffer.from([2]))), // v3
    integer(serial),
    ECDSA_SHA256,
    name(cn),
    seq(utcTime(from), utcTime(to)),
    name(cn),
    publicKey.export({ type: 'spki', format: 'der' }),
  );
  const signature = sign('sha256', tbs, privateKey); // DER-encoded ECDSA signature
  const der = seq(tbs, ECDSA_SHA256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const b64 = der.toString('base64').replace(/.{1,64}/g, '$&\n');
  return { cert: `-----BEGIN CERTIFICATE-----\n${b64}-----END CERTIFICATE-----\n`, key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

/** SHA-256 of a certificate's DER, lower-case hex: what tokens carry and nodes pin. */
export function certFingerprint(pem: string): string {
  return new X509Certificate(pem).fingerprint256.replace(/:/g, '').toLowerCase();
}

/** The same, from a peer certificate's raw DER (tls's getPeerCertificate().raw). */
export function derFingerprint(der: Buffer): string {
  return createHash('sha256').update(der).digest('hex');
}

/** The hub's certificate, made on first use (RELAY_HOME/tls/hub.crt and hub.key, 0600). */
export function ensureHubCert(home: string): { cert: string; key: string; fingerprint: string } {
  const dir = join(home, 'tls');
  const certPath = join(dir, 'hub.crt');
  const keyPath = join(dir, 'hub.key');
  if (!existsSync(certPath) || !existsSync(keyPath)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const made = selfSignedCert();
    writeFileSync(keyPath, made.key, { mode: 0o600 });
    writeFileSync(certPath, made.cert);
  }
  chmodSync(keyPath, 0o600);
  const cert = readFileSync(certPath, 'utf8');
  return { cert, key: readFileSync(keyPath, 'utf8'), fingerprint: certFingerprint(cert) };
}
