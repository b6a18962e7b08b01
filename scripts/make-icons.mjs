#!/usr/bin/env node
// Writes the tray icons (assets/tray-<state>.png, 32×32): a filled dot in the state's colour with a ring.
// Plain Node (zlib + CRC32), so the icons are reproducible without an image toolchain.
import { writeFileSync } from 'node:fs';
import { deflateSync } from 'node:zlib';

const STATES = {
  setup: [156, 163, 175],
  'hub-serving': [16, 185, 129],
  'hub-idle': [96, 165, 250],
  'node-idle': [96, 165, 250],
  'node-busy': [16, 185, 129],
  'node-paused': [245, 158, 11],
  'node-offline': [107, 114, 128],
  'node-outside-schedule': [167, 139, 250],
};
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
const crc32 = (b) => {
  let c = 0xffffffff;
  for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
};
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function png(size, [r, g, b]) {
  const rows = [];
  for (let y = 0; y < size; y++) {
    const row = [0];
    for (let x = 0; x < size; x++) {
      const d = Math.hypot(x + 0.5 - size / 2, y + 0.5 - size / 2);
      const ring = d > size * 0.42 && d <= size * 0.48;
      const dot = d <= size * 0.36;
      if (dot) row.push(r, g, b, 255);
      else if (ring) row.push(31, 41, 55, 255);
      else row.push(0, 0, 0, 0);
    }
    rows.push(Buffer.from(row));
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0);
  ihdr.writeUInt32BE(size, 4);
  ihdr[8] = 8;
  ihdr[9] = 6;
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(Buffer.concat(rows))), chunk('IEND', Buffer.alloc(0))]);
}
for (const [name, rgb] of Object.entries(STATES)) writeFileSync(new URL(`../assets/tray-${name}.png`, import.meta.url), png(32, rgb));
writeFileSync(new URL('../assets/icon.png', import.meta.url), png(256, STATES['hub-serving']));
console.log(`wrote ${Object.keys(STATES).length + 1} icons to assets/`);
