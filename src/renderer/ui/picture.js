// The pool at a glance (a classic script: its functions are globals of the dashboard page, type-checked with it
// by scripts/check-renderer.mjs against the status DTO). Draws /status's `machines` — each machine a card, each
// device a memory bar split into relay's placements, other programs' use and free room — then every shard as
// its stages in execution order, and one "why not" line per model the pool cannot place now.
/* global esc */ // ui/charts.js, loaded first
'use strict';

/** @typedef {import('relay-dto').StatusDto} PoolStatus */
/** @typedef {import('relay-dto').PictureMachine} PictureMachine */
/** @typedef {import('relay-dto').PictureDevice} PictureDevice */
/** @typedef {import('relay-dto').PictureSegment} PictureSegment */

const MB = (n) => (n >= 10_240 ? `${(n / 1024).toFixed(1)} GB` : `${Math.round(n)} MB`);
const pct = (part, total) => (total > 0 ? Math.max(0, Math.min(100, (100 * part) / total)) : 0);
const dur = (ms) => (ms >= 120_000 ? `${Math.round(ms / 60_000)} min` : `${Math.round(ms / 1000)} s`);

/** What one segment says, in words (its bar's label, its line under the bar). @param {PictureSegment} g */
function segmentWords(g) {
  const kind = g.stage ? `shard stage ${g.stage.index} of ${g.stage.of}, layers ${g.stage.layers[0]}–${g.stage.layers[1] - 1}${g.stage.output ? ', output' : ''}` : 'replica';
  const state = g.load ? `loading ${dur(g.load.elapsed_ms)} of ${dur(g.load.deadline_ms)}` : g.state;
  const speed = g.tokens_per_second !== null ? `, ${g.tokens_per_second} tok/s` : '';
  return `${g.model}, ${kind}, ${state}, ${g.in_flight} of ${g.slots} in flight${speed}, ${MB(g.mb)}`;
}

/** A device's speed as the shard planner sees it. @param {PictureDevice} d */
function speedWords(d) {
  if (!d.speed) return '';
  const s = d.speed;
  const whence = s.source === 'measured' ? `measured, ${s.samples} answers` : s.source === 'bandwidth' ? `not yet measured: from its memory's ${s.mem_gbps} GB/s` : 'default for its kind';
  return `${s.ms_per_gib} ms per GiB per token (${whence})`;
}

/** The speed's short form beside a device. @param {NonNullable<PictureDevice['speed']>} s */
const speedShort = (s) => `${s.ms_per_gib} ms/GiB${s.source === 'measured' ? '' : s.source === 'bandwidth' ? ` (from ${s.mem_gbps} GB/s)` : ' (default)'}`;

/** A node's link as measured. @param {PictureMachine} m */
function linkWords(m) {
  if (!m.link) return '';
  const rtt = m.link.rtt_ms === null ? 'round trip not yet measured' : `${m.link.rtt_ms} ms round trip`;
  const rate = m.link.bytes_per_s === null ? '' : `, pushes at ${MB(m.link.bytes_per_s / (1024 * 1024))}/s`;
  return rtt + rate;
}

/** @param {string} machine @param {PictureDevice} d */
function deviceHtml(machine, d) {
  const used = d.total_mb - d.free_mb;
  const parts = [
    ...d.segments.map((g) => `<span class="seg ${g.kind}${g.state === 'starting' ? ' starting' : ''}" style="width:${pct(g.mb, d.total_mb)}%" title="${esc(segmentWords(g))}">${esc(g.model)}</span>`),
    `<span class="seg other" style="width:${pct(d.other_mb, d.total_mb)}%" title="other programs ${MB(d.other_mb)}"></span>`,
  ].join('');
  const words = `${machine} ${d.id}: ${[...d.segments.map((g) => `${g.model} ${MB(g.mb)}`), `other programs ${MB(d.other_mb)}`, `free ${MB(d.free_mb)}`].join(', ')} of ${MB(d.total_mb)}`;
  const list = d.segments
    .map(
      (g) =>
        `<li><button type="button" class="link" data-placement="${esc(g.placement)}" data-model="${esc(g.model)}" data-kind="${g.kind}" aria-label="Details of ${esc(segmentWords(g))}">` +
        `<span class="dot ${g.kind}"></span>${esc(g.model)}</button> <span class="muted">${esc(segmentWords(g).slice(g.model.length + 2))}</span>` +
        (g.load ? ` <progress max="${g.load.deadline_ms}" value="${Math.min(g.load.elapsed_ms, g.load.deadline_ms)}" aria-label="loading ${esc(g.model)} against its deadline"></progress>` : '') +
        '</li>',
    )
    .join('');
  return (
    `<div class="device" data-device="${esc(d.id)}"><div class="devhead"><b>${esc(d.id)}</b> <span class="muted">${esc(d.description)}</span> <span class="nowrap">${MB(used)} of ${MB(d.total_mb)} used</span>` +
    (d.speed ? ` <span class="muted speed nowrap" title="${esc(speedWords(d))}">${speedShort(d.speed)}</span>` : '') +
    '</div>' +
    `<div class="membar" role="img" aria-label="${esc(words)}">${parts}</div>` +
    `<ul class="segments">${list || '<li class="muted">nothing of relay\'s runs here</li>'}</ul></div>`
  );
}

/** @param {PictureMachine} m */
function machineHtml(m) {
  const label = `${m.role === 'hub' ? 'the hub' : `node ${m.name}`}: ${m.state}${m.reason ? ` (${m.reason})` : ''}`;
  const marks = [
    ...m.backoffs.map((b) => `<li class="bad">kept off ${esc(b.model)} until ${esc(b.until.slice(11, 16))} UTC: ${esc(b.reason)}</li>`),
    ...m.pushes.map(
      (p) => `<li>receiving ${esc(p.model)} <progress max="${p.total}" value="${p.done}" aria-label="push of ${esc(p.model)} to ${esc(m.name)}"></progress> ${Math.floor(pct(p.done, p.total))}%</li>`,
    ),
  ].join('');
  return (
    `<article class="machine state-${m.state}" data-machine="${esc(m.name)}" data-state="${m.state}" aria-label="${esc(label)}">` +
    `<header><button type="button" class="link machine-name" data-machine="${esc(m.name)}" aria-label="Details of ${esc(label)}">${esc(m.role === 'hub' ? 'hub' : m.name)}</button>` +
    ` <span class="pill ${m.state}">${esc(m.state)}</span>${m.reason ? ` <span class="muted reason">${esc(m.reason)}</span>` : ''}` +
    (m.link ? ` <span class="muted link-speed">${esc(linkWords(m))}</span>` : '') +
    '</header>' +
    (m.devices.map((d) => deviceHtml(m.name, d)).join('') || `<p class="muted">${m.state === 'offline' ? 'not connected' : 'no devices'}</p>`) +
    (marks ? `<ul class="marks">${marks}</ul>` : '') +
    '</article>'
  );
}

/**
 * Each shard as its stages in execution order. With a GPU hub its stage runs last and holds the output; with a
 * CPU hub llama.cpp runs the hub's layers first, and the output layer and sampling come back to the hub at the
 * end: drawn as a last step of its own, so the flow always ends where the token is made.
 * @param {PoolStatus} s
 */
function shardFlows(s) {
  return s.shards
    .map((sh) => {
      const stages = [...sh.stages].sort((a, b) => a.index - b.index);
      const outputLast = stages.length > 0 && stages[stages.length - 1].output;
      const out = stages.find((st) => st.output);
      const tail = !outputLast && out ? `<li class="stage output" data-machine="${esc(out.node ?? 'hub')}">${esc(out.node ?? 'hub')} · ${esc(out.device)} · <b>output layer and sampling</b></li>` : '';
      const timing =
        sh.predicted_ms_per_token != null ? ` <span class="muted timing">predicted ${sh.predicted_ms_per_token} ms/token${sh.ms_per_token != null ? `, measured ${sh.ms_per_token}` : ''}</span>` : '';
      const replan = sh.replan
        ? `<p class="replan">Re-plan at its next cold start: ${esc(sh.replan.stages.map((st) => `${st.node ?? 'hub'} layers ${st.layers[0]}–${st.layers[1] - 1}`).join(' → '))}, predicted ${sh.replan.predicted_ms_per_token} ms/token <span class="muted">(${esc(sh.replan.reason)})</span></p>`
        : '';
      return (
        `<li class="flow" data-shard="${esc(sh.id)}"><button type="button" class="link" data-placement="${esc(sh.id)}" aria-label="Details of the shard of ${esc(sh.model)}"><b>${esc(sh.model)}</b></button> <span class="muted">${esc(sh.state)}</span>${timing}` +
        `<ol class="stages" aria-label="stages of ${esc(sh.model)} in execution order">${stages
          .map(
            (st) =>
              `<li class="stage${st.output && outputLast ? ' output' : ''}" data-machine="${esc(st.node ?? 'hub')}">` +
              `${esc(st.node ?? 'hub')} · ${esc(st.device)} · layers ${st.layers[0]}–${st.layers[1] - 1}${st.output && outputLast ? ' · <b>last stage, output</b>' : ''}</li>`,
          )
          .join('')}${tail}</ol>${replan}</li>`
      );
    })
    .join('');
}

/**
 * The picture's HTML: machines, shards, the models that cannot run now and why.
 * @param {PoolStatus} s
 */
function drawPool(s) {
  const unavailable = s.models.filter((m) => !m.fits_now && m.why_not);
  return (
    `<div class="machines">${s.machines.map(machineHtml).join('')}</div>` +
    (s.shards.length ? `<h3>Shards <span class="muted">(one model split across machines, in execution order)</span></h3><ul class="flows">${shardFlows(s)}</ul>` : '') +
    (unavailable.length
      ? `<h3>Cannot run now</h3><ul class="why-nots">${unavailable.map((m) => `<li data-model="${esc(m.name)}"><b>${esc(m.name)}</b>: <span class="why-not">${esc(m.why_not)}</span></li>`).join('')}</ul>`
      : '')
  );
}

/** A details list. @param {[string, unknown][]} rows */
const dl = (rows) =>
  `<dl>${rows
    .filter(([, v]) => v !== null && v !== undefined && v !== '')
    .map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`)
    .join('')}</dl>`;

/** The details of a placement (replica or shard) by id, or null. @param {PoolStatus} s @param {string} id */
function placementDetails(s, id) {
  const r = s.replicas.find((x) => x.id === id);
  const sh = s.shards.find((x) => x.id === id);
  const p = r ?? sh;
  if (!p) return null;
  /** @type {[string, unknown][]} */
  const common = [
    ['state', p.state + (p.failure ? `: ${p.failure.message}` : '')],
    ['ctx × slots', `${p.ctx} × ${p.slots}`],
    ['KV cache', p.kv_cache_type],
    ['in flight', `${p.in_flight} of ${p.slots}`],
    ['served', p.served],
    ['prefix hits', p.prefix_hits],
    ['ms per token', p.ms_per_token],
    ['prompt ms per token', p.prompt_ms_per_token],
    ['speculation', `${p.spec ?? 'none'} (${p.spec_why})`],
    ['draft accepted', p.draft_tokens ? `${p.draft_tokens.accepted} of ${p.draft_tokens.drafted} (${Math.round((100 * p.draft_tokens.accepted) / p.draft_tokens.drafted)}%)` : null],
    ['loading', p.load ? `${dur(p.load.elapsed_ms)} of ${dur(p.load.deadline_ms)}` : null],
    ['port · pid', `${p.port ?? '–'} · ${p.pid ?? '–'}`],
  ];
  if (r)
    return {
      title: `${r.model}: replica on ${r.node ? `node ${r.node}` : 'the hub'} · ${r.device}`,
      body: dl([['reserved', MB(r.need_mb)], ['started', r.started_at], ['last used', r.last_used_at], ...common, ['buffers', r.buffers.join('; ')]]),
    };
  return {
    title: `${p.model}: shard of ${sh?.stages.length} stages`,
    body: dl([
      ...common,
      ['stages', sh?.stages.map((st) => `${st.node ?? 'hub'} ${st.device} layers ${st.layers[0]}–${st.layers[1] - 1} ${MB(st.need_mb)}${stageTiming(st)}`).join(' → ')],
      ['predicted ms per token', sh?.predicted_ms_per_token],
      ['re-plan', sh?.replan ? `${sh.replan.reason}: ${sh.replan.stages.map((st) => `${st.node ?? 'hub'} ${st.layers[0]}–${st.layers[1] - 1}`).join(' → ')}` : null],
      ['warnings', sh?.warnings.join('; ')],
    ]),
  };
}

/** A stage's predicted and measured ms per token. @param {import('relay-dto').StageStatus} st */
const stageTiming = (st) => (st.predicted_ms == null ? '' : ` (${st.predicted_ms} ms predicted${st.measured_ms == null ? '' : `, ${st.measured_ms} measured`})`);

/** The details of a machine by name ("hub" or a node), or null. @param {PoolStatus} s @param {string} name */
function machineDetails(s, name) {
  const m = s.machines.find((x) => x.name === name);
  if (!m) return null;
  const devices = m.devices
    .map((d) => `${d.id} (${d.description}): ${MB(d.total_mb - d.free_mb)} of ${MB(d.total_mb)} used, ${MB(d.other_mb)} by other programs${d.speed ? `; ${speedWords(d)}` : ''}`)
    .join('; ');
  if (m.role === 'hub') {
    return {
      title: 'The hub',
      body: dl([
        ['state', m.state + (m.reason ? ` (${m.reason})` : '')],
        ['paused on schedule', s.hub.schedule],
        ['auto-pause', s.hub.auto_pause ? 'on' : 'off'],
        ['devices', devices],
        ['backend', `${s.llama_cpp.backend} (${s.llama_cpp.backend_reason})`],
      ]),
    };
  }
  const n = s.nodes.find((x) => x.name === name);
  return {
    title: `Node ${name}`,
    body: dl([
      ['state', m.state + (m.reason ? ` (${m.reason})` : '')],
      ['schedule (paused)', n?.schedule ?? 'always sharing'],
      ['relay', n?.relay_version ?? 'unknown'],
      ['refused', n?.refused?.message],
      ['last seen', n?.last_seen],
      ['joined', n?.created_at],
      ['devices', devices],
      ['link', linkWords(m)],
      ['replicas', n?.replicas.length],
      ['shard stages (rpc servers)', n?.rpcs.length],
      ['cached models', n?.cache.length],
      ['bytes through the tunnel', n?.bytes ? `http ${MB(n.bytes.http / 1048576)}, rpc ${MB(n.bytes.rpc / 1048576)}, file ${MB(n.bytes.file / 1048576)}` : null],
    ]),
  };
}
