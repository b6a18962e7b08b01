// The dashboard's charts (a classic script: its functions are globals of the page, type-checked with it by
// scripts/check-renderer.mjs). What /status said over the last minutes is kept in the page; the hub keeps the
// same minutes (/api/history), so a page opened now starts with them. Inline SVG: no chart framework.
'use strict';

const HISTORY_MS = 5 * 60_000;
/** @type {Map<string, { t: number, v: number }[]>} key → points, oldest first */
const series = new Map();

/** One reading of a series now (from /events). @param {string} key @param {number | null | undefined} v */
function record(key, v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return;
  const h = series.get(key) ?? [];
  h.push({ t: Date.now(), v });
  while (h.length > 0 && h[0].t < Date.now() - HISTORY_MS) h.shift();
  series.set(key, h);
}

/**
 * The hub's history: points older than what the page has are put in front of them; the series only the hub
 * samples (tokens per model, requests, errors: rates of its counters) are taken whole.
 * @param {{ series?: Record<string, [number, number][]> }} j
 */
function mergeHistory(j) {
  for (const [key, pts] of Object.entries(j.series ?? {})) {
    const mine = series.get(key) ?? [];
    const hubOnly = /^(gen:|req$|err$)/.test(key);
    const before = pts.filter(([t]) => hubOnly || mine.length === 0 || t < mine[0].t).map(([t, v]) => ({ t, v }));
    series.set(key, hubOnly ? before : [...before, ...mine]);
  }
}

/** Text safe inside HTML and attributes: the one escape every script of the page uses. @param {unknown} s */
const esc = (s) => String(s ?? '').replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c] ?? c);
/** A number as short as it reads well: 1234, 12.5, 0.84 (no trailing zeros). @param {number} v */
const fmt = (v) => String(Number(v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)));

/** A thumbnail line for a table cell. @param {string} key @param {string} label @param {string} unit */
function spark(key, label, unit) {
  const h = series.get(key) ?? [];
  if (h.length === 0) return '';
  const now = Date.now();
  // The x axis spans what the page has seen (at least a minute, at most five): a page opened just now
  // draws a line at once instead of a dot at the right edge.
  const span = Math.min(HISTORY_MS, Math.max(60_000, now - h[0].t));
  const t0 = now - span;
  const pts = [...h, { t: now, v: h[h.length - 1].v }]; // the last value holds until the next change
  const peak = Math.max(...pts.map((p) => p.v));
  const W = 120;
  const H = 24;
  const xy = pts.map((p) => `${(((p.t - t0) / span) * W).toFixed(1)},${(H - 1 - (peak > 0 ? p.v / peak : 0) * (H - 2)).toFixed(1)}`).join(' ');
  return (
    `<svg class="spark" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(label)}, over the last ${Math.round(span / 60_000)} min: now ${h[h.length - 1].v.toFixed(1)} ${unit}, peak ${peak.toFixed(1)} ${unit}">` +
    `<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="${xy}"/></svg>`
  );
}

/** Up to 5 round ticks from 0 to at least `peak`. @param {number} peak */
function ticks(peak) {
  if (!(peak > 0)) return [0, 1];
  const raw = peak / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const out = [];
  for (let v = 0; v < peak + step * 0.999; v += step) out.push(v);
  return out;
}

const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777', '#0891b2', '#4b5563'];

/**
 * A line chart people read: y axis with round ticks and its unit, x axis in minutes before now, one line per
 * series, a legend with each line's latest value, and the same in words for a screen reader.
 * @param {{ id: string, title: string, unit: string, lines: { key: string, name: string }[], empty: string }} c
 */
function lineChart(c) {
  const now = Date.now();
  const lines = c.lines.map((l, i) => ({ ...l, color: COLORS[i % COLORS.length], pts: series.get(l.key) ?? [] })).filter((l) => l.pts.length > 0);
  const head = `<figcaption>${esc(c.title)} <span class="muted">(${esc(c.unit)})</span></figcaption>`;
  if (lines.length === 0) return `<figure class="chart" id="${c.id}">${head}<p class="muted">${esc(c.empty)}</p></figure>`;
  const W = 360,
    H = 170,
    L = 44,
    R = 8,
    T = 8,
    B = 26;
  const first = Math.min(...lines.map((l) => l.pts[0].t));
  const span = Math.min(HISTORY_MS, Math.max(60_000, now - first));
  const ys = ticks(Math.max(...lines.flatMap((l) => l.pts.map((p) => p.v))));
  const top = ys[ys.length - 1];
  const x = (t) => L + ((t - (now - span)) / span) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const minutes = Math.round(span / 60_000);
  const grid = ys
    .map((v) => `<line x1="${L}" x2="${W - R}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" class="grid"/><text x="${L - 4}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${fmt(v)}</text>`)
    .join('');
  const xt = Array.from({ length: minutes + 1 }, (_, k) => {
    const t = now - (minutes - k) * 60_000;
    if (t < now - span - 1) return '';
    const anchor = k === minutes ? 'end' : k === 0 ? 'start' : 'middle';
    return `<text x="${x(t).toFixed(1)}" y="${H - 8}" text-anchor="${anchor}">${k === minutes ? 'now' : `−${minutes - k} min`}</text>`;
  }).join('');
  const paths = lines
    .map((l) => {
      const pts = [...l.pts, { t: now, v: l.pts[l.pts.length - 1].v }];
      return `<polyline fill="none" stroke="${l.color}" stroke-width="2" points="${pts.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ')}"/>`;
    })
    .join('');
  const latest = (l) => `${fmt(l.pts[l.pts.length - 1].v)} ${c.unit}`;
  const words = `${c.title} over the last ${minutes} min: ${lines.map((l) => `${l.name} now ${latest(l)}`).join('; ')}`;
  return (
    `<figure class="chart" id="${c.id}">${head}` +
    `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(words)}"><g class="axis">${grid}<line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>${xt}</g>${paths}</svg>` +
    `<ul class="legend">${lines.map((l) => `<li><span class="swatch" style="background:${l.color}"></span>${esc(l.name)} <span class="muted">${latest(l)}</span></li>`).join('')}</ul></figure>`
  );
}

/**
 * Who used the pool today: one bar per key, its prompt tokens and its completion tokens side by side in one bar,
 * scaled to the largest. @param {{ label: string, prompt: number, completion: number }[]} rows
 */
function usageBars(rows) {
  if (rows.length === 0) return '<p class="muted">Nothing used today yet.</p>';
  const peak = Math.max(1, ...rows.map((r) => r.prompt + r.completion));
  const W = 360;
  const L = 110;
  const bar = 14;
  const H = rows.length * (bar + 6) + 4;
  const scale = (/** @type {number} */ v) => (v / peak) * (W - L - 60);
  const g = rows
    .map((r, i) => {
      const y = 2 + i * (bar + 6);
      const p = scale(r.prompt);
      const c = scale(r.completion);
      return (
        `<text x="${L - 6}" y="${y + bar - 3}" text-anchor="end">${esc(r.label)}</text>` +
        `<rect class="bar-in" x="${L}" y="${y}" width="${p.toFixed(1)}" height="${bar}"><title>${esc(r.label)}: ${r.prompt} prompt tokens today</title></rect>` +
        `<rect class="bar-out" x="${(L + p).toFixed(1)}" y="${y}" width="${c.toFixed(1)}" height="${bar}"><title>${esc(r.label)}: ${r.completion} completion tokens today</title></rect>` +
        `<text x="${(L + p + c + 4).toFixed(1)}" y="${y + bar - 3}">${fmt(r.prompt + r.completion)}</text>`
      );
    })
    .join('');
  const words = rows.map((r) => `${r.label} ${r.prompt} in, ${r.completion} out`).join('; ');
  return `<svg class="usage" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="Tokens used today by key: ${esc(words)}">${g}</svg>`;
}
