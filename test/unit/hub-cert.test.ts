import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import { certFingerprint, derInteger, selfSignedCert } from '../../src/main/core/pairing/hub-cert.js';

/**
 * The hub's self-signed certificate is built by hand in DER. A CI run once failed because a random serial began
 * with a zero byte (non-minimal INTEGER: "illegal padding"), about 1 start in 256: these cases are fixed here.
 */
describe('hub certificate (hand-built DER)', () => {
  it('INTEGERs are minimal: leading zeros dropped, one zero kept before a high bit', () => {
    const hex = (b: Buffer): string => b.toString('hex');
    assert.equal(hex(derInteger(Buffer.from([0x00, 0x01, 0x02]))), '02020102');
    assert.equal(hex(derInteger(Buffer.from([0x00, 0x00, 0x80]))), '02020080');
    assert.equal(hex(derInteger(Buffer.from([0x80]))), '02020080');
    assert.equal(hex(derInteger(Buffer.from([0x00]))), '020100');
    assert.equal(hex(derInteger(Buffer.from([0x7f, 0xff]))), '02027fff');
  });

  it('parses for serials with a leading zero, a high bit or all ones, and the fingerprint is stable', () => {
    const serials = [Buffer.from('00' + '11'.repeat(15), 'hex'), Buffer.from('0000' + '80'.repeat(14), 'hex'), Buffer.from('ff'.repeat(16), 'hex'), Buffer.from('7f' + '00'.repeat(15), 'hex')];
    for (const serial of serials) {
      const { cert } = selfSignedCert('relay hub', 10, new Date('2026-11-30T00:00:00Z'), serial);
      const x = new X509Certificate(cert);
      assert.equal(x.subject, 'CN=relay hub');
      assert.ok(x.verify(x.publicKey), 'self-signed: verifies with its own key');
      assert.equal(certFingerprint(cert), certFingerprint(cert));
      assert.match(certFingerprint(cert), /^[0-9a-f]{64}$/);
    }
  });
});
