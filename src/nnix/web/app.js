// The nnix web UI: plain modern JavaScript (ES modules), no build step.
// Data: the overview from the native API (/api/nnix/v1), then live updates over server-sent events. Trials are
// not all loaded: the table asks the server for the rows in view (sorted and filtered there), the charts for the
// columns they draw (/columns); S.trials keeps the trials seen (rows, live updates) by id.
import * as C from './charts.js';
import { VTable, esc } from './table.js';

const API = '/api/nnix/v1';
const TOKEN_KEY = 'nnix_token';
const STATUSES = ['WAITING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'USER_CANCELED', 'SYS_CANCELED', 'EARLY_STOPPED'];
const ACTIVE = new Set(['WAITING', 'RUNNING']);
const COUNTING = new Set(['RUNNING', 'NO_MORE_TRIAL', 'TUNER_NO_MORE_TRIAL', 'INITIALIZED']);

// ---- state ---------------------------------------------------------------------------------------
const S = {
  exp: null, expAt: 0, trials: new Map(), version: 0, seq: 0,
  loading: null, buffered: [], live: false, es: null,
  sel: new Set(), curves: new Map(), curveKey: '', page: null, pageName: '',
};
window.__nnix = { tablePaint: null, parcoordsPaint: null, settled: 0, S };

// ---- API -----------------------------------------------------------------------------------------
function initToken() {
  const u = new URL(location.href);
  const t = u.searchParams.get('token');
  if (t) {
    sessionStorage.setItem(TOKEN_KEY, t);
    u.searchParams.delete('token');
    history.replaceState(null, '', u.pathname + u.search + u.hash);
  }
}
const token = () => sessionStorage.getItem(TOKEN_KEY);

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// the server's anti-CSRF secret, written into this page; every change sends it back (a foreign page can
// neither read it nor send the header). A restarted manager has a new one: fetched again once on refusal.
let csrf = (document.querySelector('meta[name="nnix-csrf"]') || {}).content || '';
async function refreshCsrf() {
  const page = await (await fetch('/', { cache: 'no-store' })).text();
  const m = /<meta name="nnix-csrf" content="([^"]*)">/.exec(page);
  if (m) csrf = m[1];
  return !!m;
}

// base: the native API by default; NNI's routes (/api/v1/nni) and the log files (/logs, base '') too
async function api(path, { method = 'GET', body, raw = false, base = API, retried = false } = {}) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  if (method !== 'GET') headers['X-Nnix-Csrf'] = csrf;
  const init = { method, headers };
  if (body !== undefined) { headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
  const r = await fetch(base + path, init);
  if (r.status === 401) { askToken(); throw new ApiError(401, 'a token is required'); }
  if (r.status === 403 && !retried && method !== 'GET') {
    const why = await r.clone().json().catch(() => ({}));
    if (why.reason === 'csrf' && await refreshCsrf()) return api(path, { method, body, raw, base, retried: true });
  }
  if (raw) { if (!r.ok) throw new ApiError(r.status, await r.text()); return r; }
  const ctype = r.headers.get('content-type') || '';
  const data = ctype.includes('json') ? await r.json() : await r.text();
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || r.statusText);
  return data;
}

// ---- small helpers -------------------------------------------------------------------------------
const $ = (sel, root = document) => root.querySelector(sel);
const nowServer = () => Date.now() + (S.exp ? S.exp.now - S.expAt : 0);
const maximize = () => !S.exp || S.exp.direction !== 'minimize';

function toast(text, kind = '') {
  const el = document.createElement('div');
  el.className = 'toast ' + kind; el.textContent = text;
  $('#toasts').appendChild(el);
  setTimeout(() => el.remove(), kind === 'error' ? 7000 : 3500);
}

function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function fmtDur(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '–';
  s = Math.max(0, s);
  if (s < 0.9995) return Math.round(s * 1000) + 'ms';  // a quick trial: 40ms, not 0.0s
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), r = Math.floor(s % 60);
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m ${r}s`;
  return `${m}m ${r}s`;
}

function parseDur(text) {
  const m = String(text).trim().match(/^(\d+(?:\.\d+)?)\s*([smhd]?)$/i);
  if (!m) return null;
  return Math.ceil(parseFloat(m[1]) * { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2].toLowerCase()]);
}

function durationOf(t) {
  if (t.duration !== null && t.duration !== undefined) return t.duration;
  if (t.start && t.status === 'RUNNING') return (nowServer() - t.start) / 1000;
  return null;
}

function elapsedNow() {
  const e = S.exp;
  if (!e) return 0;
  return e.elapsed + (COUNTING.has(e.status) ? Math.max(0, (Date.now() - S.expAt) / 1000) : 0);
}

function finalKey(t, key) {
  const f = t.final;
  if (f && typeof f === 'object') { const v = f[key]; return typeof v === 'number' ? v : null; }
  return key === 'default' && typeof f === 'number' ? f : null;
}

function better(a, b) { return maximize() ? a > b : a < b; }

function modal(html, onMount) {
  const m = $('#modal'), box = $('#modal-box');
  box.innerHTML = html; m.hidden = false;
  const close = () => { m.hidden = true; box.innerHTML = ''; };
  m.onclick = (ev) => { if (ev.target === m) close(); };
  if (onMount) onMount(box, close);
  return close;
}

function confirmDialog(text, okText = 'OK') {
  return new Promise((resolve) => {
    modal(`<h3>Please confirm</h3><p>${esc(text)}</p><div class="modal-actions">
      <button id="confirm-cancel">Cancel</button><button id="confirm-ok" class="primary">${esc(okText)}</button></div>`,
    (box, close) => {
      $('#confirm-ok', box).onclick = () => { close(); resolve(true); };
      $('#confirm-cancel', box).onclick = () => { close(); resolve(false); };
    });
  });
}

let asking = false;
function askToken() {
  if (asking) return;
  asking = true;
  modal(`<h3>Access token needed</h3><p>This experiment's API listens beyond this machine and needs its token.
    Open the link <code>nnix</code> printed, or paste the token (file <code>api.token</code> in the experiment's directory).</p>
    <input id="token-input" type="text" style="width:100%" placeholder="token"><div class="modal-actions">
    <button id="token-save" class="primary">Use token</button></div>`, (box) => {
    $('#token-save', box).onclick = () => {
      sessionStorage.setItem(TOKEN_KEY, $('#token-input', box).value.trim());
      location.reload();
    };
  });
}

// ---- data: snapshot + live updates ---------------------------------------------------------------
function setExp(exp) {
  S.exp = exp; S.expAt = Date.now();
  document.body.classList.toggle('readonly', !!exp.readOnly);
  $('#ro-badge').hidden = !exp.readOnly;
  for (const id of ['ed-concurrency', 'ed-maxtrials', 'ed-duration']) { const el = $('#' + id); if (el) el.disabled = !!exp.readOnly; }
  $('#exp-name').textContent = exp.name || 'experiment';
  $('#exp-id').textContent = exp.id;
  const b = $('#exp-status');
  b.textContent = exp.status; b.className = 'badge st-' + exp.status;
  b.title = [exp.message, ...(exp.errors || [])].filter(Boolean).join('\n');
  document.title = `${exp.status} · ${exp.name || exp.id} · nnix`;
}

async function loadSnapshot() {
  if (S.page && S.page.prefetch) S.page.prefetch();  // (the rows in view: asked for with the overview, not after it)
  const exp = await api('/experiment');
  S.seq = exp.seq;
  setExp(exp);
  const buffered = S.buffered; S.buffered = [];
  for (const msg of buffered) if (msg.seq > S.seq) applyUpdate(msg);
  S.version++;
  changed();
}

function reload() {
  if (!S.loading) {
    S.loading = loadSnapshot().catch((e) => { if (e.status !== 401) toast('Cannot load the experiment: ' + e.message, 'error'); })
      .finally(() => { S.loading = null; });
  }
  return S.loading;
}

function applyUpdate(msg) {
  if (msg.experiment) setExp(msg.experiment);
  S.seq = Math.max(S.seq, msg.seq || 0);
  if (msg.trials && msg.trials.length) {
    for (const t of msg.trials) S.trials.set(t.id, t);
    S.version++;
  }
  if (msg.metrics) {
    for (const m of msg.metrics) {
      if (m.type !== 'PERIODICAL') continue;
      const c = S.curves.get(m.trial);
      if (!c) continue;
      const v = typeof m.value === 'number' ? m.value : (m.value && typeof m.value.default === 'number' ? m.value.default : null);
      if (v !== null && Number.isFinite(v)) { c.x.push(m.sequence); c.y.push(v); }
    }
  }
}

function connect() {
  const t = token();
  const es = new EventSource(API + '/events' + (t ? '?token=' + encodeURIComponent(t) : ''));
  S.es = es;
  const onMsg = (ev) => {
    const msg = JSON.parse(ev.data);
    if (S.loading) { S.buffered.push(msg); return; }
    if (msg.seq <= S.seq) return;  // already in the snapshot
    applyUpdate(msg);
    changed();
  };
  es.addEventListener('hello', (ev) => {
    setLive(true);
    const seq = JSON.parse(ev.data).seq;
    // what happened before this connection is in a snapshot: reload if ours is older
    (S.loading || Promise.resolve()).then(() => { if (seq > S.seq) reload(); });
  });
  es.addEventListener('update', onMsg);
  es.addEventListener('tick', onMsg);
  es.addEventListener('resync', () => reload());
  es.onerror = () => setLive(false);
}

function setLive(on) {
  S.live = on;
  const el = $('#live');
  el.classList.toggle('on', on);
  el.title = on ? 'live updates: connected' : 'live updates: reconnecting…';
}

let renderPending = false;
function changed() {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => {
    renderPending = false;
    if (S.page && S.page.update) S.page.update();
    if (detail.id) detail.refresh();
  });
}

// First-paint marks (read by bench/scale_ui.py): after the next frame is painted.
function markPaint(field, name) {
  window.__nnix[field] = -1;
  requestAnimationFrame(() => setTimeout(() => {
    performance.mark(name);
    window.__nnix[field] = performance.now();
  }, 0));
}

// ---- derived data (from the server: pages and columns) -----------------------------------------
const bigExp = () => !!S.exp && S.exp.total > 2000;
const bestFirst = () => (maximize() ? '-metric' : 'metric');

function remember(items) { for (const t of items) S.trials.set(t.id, t); return items; }

// a page of trials as the server sorts and filters them; each is remembered by id
async function trialPage(query) {
  const page = await api('/trials?' + new URLSearchParams(query).toString());
  remember(page.items);
  return page;
}

// the columns a chart of every trial needs: { id: [...], field: [...], total }; one request per state version
// and query (a second caller of the same waits for the first's answer)
const columnCache = new Map();
function columns(fields, query = {}) {
  const q = new URLSearchParams({ fields: fields.join(','), ...query }).toString();
  const hit = columnCache.get(q);
  if (hit && hit.version === S.version) return hit.promise;
  const promise = api('/columns?' + q);
  columnCache.set(q, { version: S.version, promise });
  promise.catch(() => columnCache.delete(q));
  return promise;
}

// the best-so-far line is exact: every succeeded trial's metric (as numbers, a few bytes each) is sent
async function metricScatter() {
  const c = await columns(['seq', 'metric'], { status: 'SUCCEEDED' });
  const points = [];
  for (let i = 0; i < c.id.length; i++) {
    const y = c.metric[i];
    if (y !== null) points.push({ x: c.seq[i], y, id: c.id[i], t: { id: c.id[i], seq: c.seq[i], status: 'SUCCEEDED', metric: y } });
  }
  const best = [];
  let cur = null;
  for (const p of points) if (cur === null || better(p.y, cur)) { cur = p.y; best.push([p.x, p.y]); }
  return { points, best };
}

// the n best succeeded trials, best first
async function topTrials(n) {
  return (await trialPage({ status: 'SUCCEEDED', sort: bestFirst(), limit: n })).items.filter((t) => t.metric !== null);
}

function describeTrial(t) {
  t = S.trials.get(t.id) || t;
  const lines = [`Trial #${t.seq}  ${t.id}  ${t.status}`, `metric: ${C.fmt(t.metric)}`];
  for (const [k, v] of Object.entries(t.params || {}).slice(0, 10)) lines.push(`${k}: ${typeof v === 'number' ? C.fmt(v) : JSON.stringify(v)}`);
  return lines.join('\n');
}

// ---- Overview page -------------------------------------------------------------------------------
const overview = {
  enter(main) {
    main.innerHTML = `
      <div class="grid">
        <div class="card" id="ov-status"></div>
        <div class="card" id="ov-trials"></div>
        <div class="card" id="ov-duration"></div>
        <div class="card" id="ov-best"></div>
      </div>
      <div class="grid section">
        <div class="card"><h3>Limits</h3>
          <div class="edit-row"><label for="ed-concurrency">Trial concurrency</label><input id="ed-concurrency" type="number" min="1" step="1"></div>
          <div class="edit-row"><label for="ed-maxtrials">Max trial number</label><input id="ed-maxtrials" type="number" min="1" step="1"></div>
          <div class="edit-row"><label for="ed-duration">Max experiment duration</label><input id="ed-duration" type="text" placeholder="e.g. 2h"></div>
          <div class="edit-row write"><button id="ed-save" class="primary">Save</button><button id="ed-reset">Reset</button><span id="ed-msg" class="muted"></span></div>
        </div>
        <div class="card" id="ov-info"></div>
      </div>
      <div class="card section"><h3>Default metric <span class="muted">(succeeded trials; red: best so far)</span></h3>
        <div class="chart-wrap"><canvas class="chart" id="ov-scatter"></canvas><div class="tooltip" hidden></div></div></div>
      <div class="card section"><h3>Top trials</h3><div id="ov-top"></div></div>
      <div class="card section"><details><summary><b>Configuration</b> (with the current search space)</summary><pre id="ov-config"></pre></details></div>`;
    this.chart = null; this.lastVersion = -1; this.lastDraw = -Infinity; this.dirtyInputs = false;
    const cv = $('#ov-scatter');
    C.interact(cv, cv.nextElementSibling, () => this.chart, (p) => describeTrial(p.t), (p) => openTrial(p.id));
    for (const id of ['ed-concurrency', 'ed-maxtrials', 'ed-duration']) $('#' + id).addEventListener('input', () => { this.dirtyInputs = true; });
    $('#ed-reset').onclick = () => { this.dirtyInputs = false; this.fillInputs(); };
    $('#ed-save').onclick = () => this.save();
    this.timer = setInterval(() => this.clock(), 1000);
    this.fillInputs();
    this.update();
  },
  leave() { clearInterval(this.timer); },
  fillInputs() {
    const e = S.exp;
    if (!e || this.dirtyInputs) return;
    $('#ed-concurrency').value = e.limits.trialConcurrency ?? '';
    $('#ed-maxtrials').value = e.limits.maxTrialNumber ?? '';
    $('#ed-duration').value = e.limits.maxExperimentDuration ? humanSeconds(e.limits.maxExperimentDuration) : '';
    for (const id of ['ed-concurrency', 'ed-maxtrials', 'ed-duration']) $('#' + id).disabled = !!e.readOnly;
  },
  async save() {
    const e = S.exp, body = {};
    const conc = $('#ed-concurrency').value.trim(), maxn = $('#ed-maxtrials').value.trim(), dur = $('#ed-duration').value.trim();
    if (conc && Number(conc) !== e.limits.trialConcurrency) {
      if (!/^\d+$/.test(conc) || Number(conc) < 1) return this.msg('concurrency must be a positive integer', true);
      body.trialConcurrency = Number(conc);
    }
    if (maxn && Number(maxn) !== e.limits.maxTrialNumber) {
      if (!/^\d+$/.test(maxn) || Number(maxn) < 1) return this.msg('max trial number must be a positive integer', true);
      body.maxTrialNumber = Number(maxn);
    }
    if (dur) {
      const s = parseDur(dur);
      if (s === null || s <= 0) return this.msg('duration: a number with s, m, h or d, e.g. 90m', true);
      if (s !== e.limits.maxExperimentDuration) {
        if (s < elapsedNow()) return this.msg(`duration must be at least the elapsed time (${fmtDur(elapsedNow())})`, true);
        body.maxExperimentDuration = s;
      }
    }
    if (!Object.keys(body).length) return this.msg('nothing changed');
    try {
      setExp(await api('/experiment', { method: 'PATCH', body }));
      this.dirtyInputs = false; this.fillInputs();
      this.msg('saved'); toast('Limits updated');
    } catch (err) { this.msg(err.message, true); }
  },
  msg(text, bad) { const el = $('#ed-msg'); el.textContent = text; el.className = bad ? 'err' : 'muted'; },
  clock() {
    const e = S.exp;
    if (!e) return;
    const el = elapsedNow(), max = e.limits.maxExperimentDuration;
    const pct = max ? Math.min(100, (100 * el) / max) : 0;
    $('#ov-duration').innerHTML = `<h3>Duration</h3><div class="big">${fmtDur(el)}</div>
      <div class="bar"><div style="width:${pct}%"></div></div>
      <div class="muted">${max ? `of ${fmtDur(max)}` + (COUNTING.has(e.status) ? ` · remaining ${fmtDur(Math.max(0, max - el))}` : '')
        : 'no duration limit'}</div>
      <div class="muted">started ${fmtTime(e.startTime)}${e.endTime ? ' · ended ' + fmtTime(e.endTime) : ''}</div>`;
  },
  update() {
    const e = S.exp;
    if (!e) return;
    const c = e.counts || {};
    const stopped = (c.USER_CANCELED || 0) + (c.SYS_CANCELED || 0) + (c.EARLY_STOPPED || 0);
    const errs = (e.errors || []).map((x) => `<div class="err">${esc(x)}</div>`).join('');
    $('#ov-status').innerHTML = `<h3>Status</h3><div class="big st st-${esc(e.status)}" id="ov-status-text">${esc(e.status)}</div>
      <div class="muted">${esc(e.message || '')}</div>${errs}${e.waitingReason ? `<div class="muted">waiting: ${esc(e.waitingReason)}</div>` : ''}`;
    const maxn = e.limits.maxTrialNumber;
    const pct = maxn ? Math.min(100, (100 * e.total) / maxn) : 0;
    $('#ov-trials').innerHTML = `<h3>Trials</h3><div class="counts">
      <div><b class="st-SUCCEEDED">${c.SUCCEEDED || 0}</b>succeeded</div><div><b class="st-RUNNING">${c.RUNNING || 0}</b>running</div>
      <div><b class="st-WAITING">${c.WAITING || 0}</b>waiting</div><div><b class="st-FAILED">${c.FAILED || 0}</b>failed</div>
      <div><b class="st-USER_CANCELED">${stopped}</b>stopped</div></div>
      <div class="bar"><div style="width:${pct}%"></div></div>
      <div class="muted">${e.total}${maxn ? ' of ' + maxn : ''} trials · concurrency ${e.limits.trialConcurrency ?? '–'}</div>`;
    const best = e.best;
    $('#ov-best').innerHTML = `<h3>Best metric <span class="muted">(${esc(e.direction)})</span></h3>
      <div class="big" id="ov-best-value">${best ? esc(C.fmt(best.metric)) : 'N/A'}</div>
      <div>${best ? `trial <a href="#/trial/${esc(best.id)}">#${best.seq} ${esc(best.id)}</a>` : '<span class="muted">no succeeded trial yet</span>'}</div>`;
    const cfg = e.config || {};
    const tuner = cfg.tuner ? (cfg.tuner.name || cfg.tuner.className || '') : '';
    const assessor = cfg.assessor ? (cfg.assessor.name || cfg.assessor.className || '') : '';
    $('#ov-info').innerHTML = `<h3>Experiment</h3><dl class="kv">
      <dt>Name</dt><dd>${esc(e.name || '–')}</dd><dt>ID</dt><dd><code>${esc(e.id)}</code></dd>
      <dt>Trial command</dt><dd><code>${esc(e.trialCommand)}</code></dd><dt>Platform</dt><dd>${esc(e.platform)}</dd>
      <dt>Tuner</dt><dd>${esc(tuner)}</dd>${assessor ? `<dt>Assessor</dt><dd>${esc(assessor)}</dd>` : ''}
      <dt>Log directory</dt><dd><code>${esc(e.logDir)}</code></dd><dt>Version</dt><dd>nnix ${esc(e.version)}</dd></dl>`;
    $('#ov-config').textContent = JSON.stringify(cfg, null, 2);
    this.fillInputs();
    this.clock();
    if (this.lastVersion !== S.version) {
      const now = performance.now();
      if (now - this.lastDraw < 800 && bigExp()) { clearTimeout(this.later); this.later = setTimeout(changed, 800); return; }
      this.lastVersion = S.version; this.lastDraw = now;
      this.draw().catch((err) => toast('Cannot load the trials: ' + err.message, 'error'));
    }
  },
  async draw() {
    const [scatter, top] = await Promise.all([metricScatter(), topTrials(10)]);
    if (S.page !== overview || !$('#ov-scatter')) return;
    this.chart = C.scatter($('#ov-scatter'), { ...scatter, xLabel: 'Trial No.', yLabel: 'default metric', emptyText: 'No succeeded trial yet' });
    {
      $('#ov-top').innerHTML = top.length ? `<table class="plain"><tr><th>Trial No.</th><th>ID</th><th>Status</th><th>Duration</th><th>Default metric</th><th>Parameters</th></tr>
        ${top.map((t) => `<tr><td>${t.seq}</td><td><a href="#/trial/${esc(t.id)}">${esc(t.id)}</a></td><td class="st st-${t.status}">${t.status}</td>
        <td>${fmtDur(durationOf(t))}</td><td class="num">${esc(C.fmt(t.metric))}</td><td class="mono">${esc(JSON.stringify(t.params))}</td></tr>`).join('')}</table>`
        : '<p class="muted">No succeeded trial yet.</p>';
    }
  },
};

function humanSeconds(s) {
  if (s % 86400 === 0) return s / 86400 + 'd';
  if (s % 3600 === 0) return s / 3600 + 'h';
  if (s % 60 === 0) return s / 60 + 'm';
  return s + 's';
}

// ---- Trials page ---------------------------------------------------------------------------------
const COLS_KEY = 'nnix_columns';

const PARALLEL_LINES = 2000;  // lines of the parallel coordinates at most (a sample of the trials, best to worst)
const BLOCK = 100;  // rows per request of the table
const MARGIN = 60;  // rows loaded beyond those in view

const trials = {
  enter(main, arg) {
    main.innerHTML = `
      <div class="card">
        <div class="tabs" id="chart-tabs">
          <button data-tab="metric">Default metric</button><button data-tab="params">Hyper-parameters</button>
          <button data-tab="inter">Intermediate results</button><button data-tab="duration">Duration</button></div>
        <div class="chart-controls" id="chart-controls"></div>
        <div class="chart-wrap"><canvas class="chart" id="trials-chart"></canvas><div class="tooltip" hidden></div></div>
        <div class="legend" id="chart-legend"></div>
      </div>
      <div class="toolbar">
        <input id="trial-search" type="search" placeholder="Search id / No. or e.g. lr>0.01; metric>0.9" style="width:330px">
        <div class="chips" id="status-chips"></div>
        <details class="dropdown" id="col-chooser"><summary>Columns</summary><div id="col-list"></div></details>
        <button id="btn-compare" disabled>Compare</button>
        <button id="btn-clear-sel" disabled>Clear selection</button>
        <button id="btn-tensorboard" disabled title="select trials to open TensorBoard on their outputs">TensorBoard</button>
        <span class="muted" id="trial-count"></span>
      </div>
      <div id="trial-table"></div>`;
    this.tab = ['metric', 'params', 'inter', 'duration'].includes(arg) ? arg : (this.tab || 'metric');
    this.sortKey = this.sortKey || 'seq'; this.desc = this.desc || false;
    this.statuses = this.statuses || new Set();
    this.search = ''; this.data = null; this.loads = 0; this.pre = null;
    this.shown = new Promise((done) => { this.showRows = done; });
    this.lastVersion = -1; this.chartVersion = -1; this.draws = 0; this.lastChart = -Infinity; this.chart = null;
    this.hidden = new Set(JSON.parse(localStorage.getItem(COLS_KEY) || '["start","end","nInter"]'));
    this.axesChosen = this.axesChosen || null; this.topPct = this.topPct || 100; this.interMode = this.interMode || 'top10';
    const cv = $('#trials-chart');
    C.interact(cv, cv.nextElementSibling, () => this.chart, (hit) => this.describe(hit), (hit) => openTrial(hit.id));
    $('#chart-tabs').onclick = (ev) => {
      const b = ev.target.closest('button[data-tab]');
      if (b) { this.tab = b.dataset.tab; history.replaceState(null, '', '#/trials/' + this.tab); this.setupTab(); }
    };
    const search = $('#trial-search');
    let deb = null;
    search.addEventListener('input', () => {
      clearTimeout(deb);
      deb = setTimeout(() => { this.search = search.value; this.refreshRows(true); }, 120);
    });
    $('#status-chips').addEventListener('change', (ev) => {
      const box = ev.target.closest('input[name=status-filter]');
      if (!box) return;
      if (box.checked) this.statuses.add(box.value); else this.statuses.delete(box.value);
      this.refreshRows(true);
    });
    $('#col-list').addEventListener('change', (ev) => {
      const box = ev.target.closest('input[data-col]');
      if (!box) return;
      if (box.checked) this.hidden.delete(box.dataset.col); else this.hidden.add(box.dataset.col);
      localStorage.setItem(COLS_KEY, JSON.stringify([...this.hidden]));
      this.setupColumns(true);
    });
    $('#btn-compare').onclick = () => { location.hash = '#/compare/' + [...S.sel].join(','); };
    $('#btn-clear-sel').onclick = () => { S.sel.clear(); this.selChanged(); };
    $('#btn-tensorboard').onclick = () => openTensorboard([...S.sel]);
    this.table = new VTable($('#trial-table'), {
      onSort: (key) => {
        if (this.sortKey === key) this.desc = !this.desc; else { this.sortKey = key; this.desc = key === 'metric' ? maximize() : false; }
        this.table.setSort(this.sortKey, this.desc);
        this.refreshRows(true);
      },
      onClick: (id) => openTrial(id),
      onAction: (act, id) => { if (act === 'kill') killTrial(id); else if (act === 'open') openTrial(id); },
      onSelect: (id, on) => {
        if (on) S.sel.add(id); else S.sel.delete(id);
        this.selChanged();
      },
      onView: (first, last) => this.want(first, last),
      rowClass: (t) => (S.sel.has(t.id) ? 'sel' : ''),
      emptyText: 'No trial matches',
    });
    this.colSig = '';
    this.setupColumns(true);
    this.table.setSort(this.sortKey, this.desc);
    this.timer = setInterval(() => { if (S.exp && S.exp.counts && S.exp.counts.RUNNING) this.table.render(); }, 1000);
    this.setupTab();
    this.update();
  },
  leave() { clearInterval(this.timer); clearTimeout(this.refetch); clearTimeout(this.chartTimer); },
  selChanged() {
    const n = S.sel.size;
    $('#btn-compare').disabled = n < 2 || n > 5;
    $('#btn-compare').title = 'select 2 to 5 trials to compare';
    $('#btn-clear-sel').disabled = n === 0;
    $('#btn-tensorboard').disabled = n === 0;
    $('#btn-tensorboard').textContent = n ? `TensorBoard (${n})` : 'TensorBoard';
    $('#btn-compare').textContent = n ? `Compare (${n})` : 'Compare';
    this.table.render();
    if (this.tab === 'inter' || this.tab === 'params') this.drawChart(true);
  },
  columns() {
    const e = S.exp || { paramKeys: [], metricKeys: [] };
    const cols = [
      { key: 'sel', title: '', width: 36, cls: 'c-sel', sortable: false, fixed: true, html: (t) => `<input type="checkbox" data-sel aria-label="select" ${S.sel.has(t.id) ? 'checked' : ''}>` },
      { key: 'seq', title: 'Trial No.', width: 92, cls: 'num c-seq', html: (t) => String(t.seq) },
      { key: 'id', title: 'ID', width: 80, cls: 'mono c-id', html: (t) => esc(t.id) },
      { key: 'status', title: 'Status', width: 130, cls: 'c-status', html: (t) => `<span class="st st-${t.status}">${t.status}</span>` },
      { key: 'message', title: 'Reason', tip: 'why it failed or was stopped (its stderr: Detail)', width: 300, cls: 'c-reason', html: (t) => (t.message && t.status !== 'SUCCEEDED' ? `<span class="${t.status === 'FAILED' ? 'err' : 'muted'}" title="${esc(t.message)}">${esc(t.message)}</span>` : '') },
      { key: 'metric', title: 'Default metric', width: 132, cls: 'num c-metric', html: (t) => (t.metric !== null ? esc(C.fmt(t.metric)) : t.latest !== null && t.latest !== undefined ? `<span class="muted" title="latest intermediate result">${esc(C.fmt(t.latest))}</span>` : '–') },
      { key: 'duration', title: 'Duration', width: 95, cls: 'num c-duration', html: (t) => fmtDur(durationOf(t)) },
      { key: 'start', title: 'Start', width: 150, cls: 'c-start', html: (t) => fmtTime(t.start) },
      { key: 'end', title: 'End', width: 150, cls: 'c-end', html: (t) => fmtTime(t.end) },
      { key: 'nInter', title: '#Intermediate', width: 105, cls: 'num', html: (t) => String(t.nInter) },
    ];
    for (const k of e.paramKeys || []) {
      cols.push({ key: 'param:' + k, title: k, tip: 'parameter ' + k, width: 110, cls: 'num', html: (t) => { const v = t.params ? t.params[k] : undefined; return v === undefined ? '' : esc(typeof v === 'number' ? C.fmt(v) : JSON.stringify(v)); } });
    }
    for (const k of e.metricKeys || []) {
      if (k === 'default') continue;
      cols.push({ key: 'metric:' + k, title: k, tip: 'final metric ' + k, titleHtml: `<i>${esc(k)}</i>`, width: 100, cls: 'num', html: (t) => esc(C.fmt(finalKey(t, k))) });
    }
    cols.push({ key: 'actions', title: '', width: 120, sortable: false, fixed: true, html: (t) => `<button class="small" data-act="open">Detail</button>${ACTIVE.has(t.status) ? ' <button class="small danger write" data-act="kill">Kill</button>' : ''}` });
    return cols;
  },
  setupColumns(force) {
    const all = this.columns();
    const sig = all.map((c) => c.key).join('|') + '#' + [...this.hidden].join('|');
    if (!force && sig === this.colSig) return;
    this.colSig = sig;
    $('#col-list').innerHTML = all.filter((c) => !c.fixed).map((c) => `<label><input type="checkbox" data-col="${esc(c.key)}" ${this.hidden.has(c.key) ? '' : 'checked'}> ${esc(c.title || c.key)}</label>`).join('');
    this.table.setColumns(all.filter((c) => c.fixed || !this.hidden.has(c.key)));
  },
  chips() {
    const c = (S.exp && S.exp.counts) || {};
    const html = STATUSES.map((s) => `<label class="chip"><input type="checkbox" name="status-filter" value="${s}" ${this.statuses.has(s) ? 'checked' : ''}><span class="st st-${s}">${s}</span> ${c[s] || 0}</label>`).join('');
    if (html !== this.chipsHtml) { $('#status-chips').innerHTML = html; this.chipsHtml = html; }
  },
  // the server's query of the table: sort, status filter and search
  query() {
    const q = { sort: (this.desc ? '-' : '') + this.sortKey };
    if (this.statuses.size) q.status = [...this.statuses].join(',');
    if (this.search.trim()) q.q = this.search.trim();
    return q;
  },
  // rows first..last are shown: load the blocks of them (and a margin) not loaded yet for this query
  want(first, last) {
    const d = this.data;
    if (!d) return;
    const lo = Math.max(0, Math.floor((first - MARGIN) / BLOCK)), hi = Math.floor((last + MARGIN) / BLOCK);
    for (let b = lo; b <= hi && b * BLOCK < d.total; b++) if (!d.blocks.has(b)) this.load(d, b);
  },
  async load(d, b) {
    d.blocks.set(b, null);  // asked for
    try {
      const page = await trialPage({ ...d.query, offset: b * BLOCK, limit: BLOCK });
      if (this.data !== d) return;
      d.blocks.set(b, page.items);
      if (page.total !== d.total) { d.total = page.total; this.showCount(); }
      this.table.setSource(d.total, (i) => { const x = d.blocks.get(Math.floor(i / BLOCK)); return x ? x[i % BLOCK] || null : null; });
    } catch (err) { if (this.data === d) { d.blocks.delete(b); toast('Cannot load trials: ' + err.message, 'error'); } }
  },
  // the rows in view and a margin, in blocks
  window() {
    const el = this.table.root;
    const first = Math.max(0, Math.floor((el.scrollTop - 30) / this.table.rh) - MARGIN);
    const b0 = Math.floor(first / BLOCK);
    return { offset: b0 * BLOCK, limit: (Math.ceil((first + Math.ceil((el.clientHeight || 600) / this.table.rh) + 2 * MARGIN) / BLOCK) - b0) * BLOCK };
  },
  prefetch() {
    const ask = { ...this.query(), ...this.window() };
    const page = trialPage(ask);
    page.catch(() => null);
    this.pre = { key: JSON.stringify(ask), page };
  },
  showCount() {
    const d = this.data;
    if (d) $('#trial-count').textContent = `${d.total} of ${S.exp ? S.exp.total : d.total} trials`;
  },
  // the rows again from the server (a new sort, filter, or the trials changed): the rows in view first; the old ones
  // stay shown until they come
  async refreshRows(force) {
    if (!force && this.lastVersion === S.version) return;
    if (!force && this.data && bigExp() && performance.now() - this.lastRows < 1000) {  // live: at most once a second
      clearTimeout(this.refetch); this.refetch = setTimeout(() => this.refreshRows(false), 1000); return;
    }
    this.lastVersion = S.version; this.lastRows = performance.now();
    const query = this.query(), n = ++this.loads;
    const b0 = this.window().offset / BLOCK;
    const ask = { ...query, ...this.window() }, pre = this.pre;
    this.pre = null;
    let page;
    try { page = await (pre && pre.key === JSON.stringify(ask) ? pre.page : trialPage(ask)); } catch (err) {
      this.showRows();
      if (n === this.loads) toast('Cannot load trials: ' + err.message, 'error');
      return;
    }
    if (n !== this.loads || S.page !== trials || !$('#trial-table')) return;
    const d = { query, total: page.total, blocks: new Map() };
    for (let k = 0; k * BLOCK < page.items.length; k++) d.blocks.set(b0 + k, page.items.slice(k * BLOCK, (k + 1) * BLOCK));
    this.data = d;
    this.table.setSource(d.total, (i) => { const x = d.blocks.get(Math.floor(i / BLOCK)); return x ? x[i % BLOCK] || null : null; });
    this.showCount();
    window.__nnix.settled++;
    requestAnimationFrame(() => setTimeout(this.showRows, 0));
    if (window.__nnix.tablePaint === null && S.exp && !S.loading) markPaint('tablePaint', 'nnix:table');
  },
  update() {
    if (!S.exp) return;
    this.chips();
    this.setupColumns(false);
    this.refreshRows(false);
    this.drawChart(false);
  },
  setupTab() {
    for (const b of document.querySelectorAll('#chart-tabs button')) b.classList.toggle('active', b.dataset.tab === this.tab);
    const ctl = $('#chart-controls');
    $('#chart-legend').innerHTML = '';
    if (this.tab === 'params') {
      ctl.innerHTML = `<span>Axes:</span><div class="axes-list" id="axes-list"></div>
        <label>Top <select id="top-pct">${[100, 50, 20, 10, 5, 1].map((p) => `<option value="${p}" ${p === this.topPct ? 'selected' : ''}>${p}%</option>`).join('')}</select> of trials (by metric)</label>`;
      $('#top-pct').onchange = (ev) => { this.topPct = Number(ev.target.value); this.drawChart(true); };
      $('#axes-list').onchange = (ev) => {
        const box = ev.target.closest('input[data-axis]');
        if (!box) return;
        const chosen = new Set(this.axesChosen || this.axisNames());
        if (box.checked) chosen.add(box.dataset.axis); else chosen.delete(box.dataset.axis);
        this.axesChosen = this.axisNames().filter((a) => chosen.has(a));
        this.drawChart(true);
      };
    } else if (this.tab === 'inter') {
      ctl.innerHTML = `<label>Show <select id="inter-mode">
        <option value="top10">top 10 trials</option><option value="top50">top 50 trials</option>
        <option value="sel">selected trials</option><option value="all">all trials (downsampled)</option></select></label>
        <span class="muted">Select trials in the table to highlight them.</span>`;
      $('#inter-mode').value = this.interMode;
      $('#inter-mode').onchange = (ev) => { this.interMode = ev.target.value; this.drawChart(true); };
    } else if (this.tab === 'metric') {
      ctl.innerHTML = '<span class="muted">Final default metric of succeeded trials; the red line is the best so far. Click a point for its trial.</span>';
    } else {
      ctl.innerHTML = '<span class="muted">Duration of each trial (running ones: so far), coloured by status.</span>';
    }
    this.drawChart(true);
  },
  axisNames() {
    return [...((S.exp && S.exp.paramKeys) || []), 'metric'];
  },
  describe(hit) {
    const t = S.trials.get(hit.id) || hit.t;
    if (this.tab === 'inter') return `Trial #${t ? t.seq : '?'} ${hit.id}\nstep ${hit.x}: ${C.fmt(hit.y)}`;
    if (this.tab === 'duration') return `Trial #${t ? t.seq : '?'} ${hit.id}\n${fmtDur(hit.y)}`;
    return t ? describeTrial(t) : hit.id;
  },
  drawChart(force) {
    if (!S.exp) return;
    const now = performance.now();
    if (!force && this.chartVersion === S.version) return;
    const minGap = bigExp() ? 1500 : 300;
    if (!force && now - this.lastChart < minGap) {
      clearTimeout(this.chartTimer);
      this.chartTimer = setTimeout(() => this.drawChart(false), minGap - (now - this.lastChart));
      return;
    }
    this.chartVersion = S.version; this.lastChart = now;
    if (!$('#trials-chart')) return;
    const tab = this.tab, n = ++this.draws;
    this.plot(tab, () => n === this.draws && this.tab === tab && S.page === trials && $('#trials-chart'))
      .catch((err) => toast('Cannot load the chart: ' + err.message, 'error'));
  },
  // draw the chart of `tab` once its data came (and the table's first rows are painted: they come first), if still
  // current()
  async plot(tab, current) {
    if (tab === 'metric') {
      const data = await metricScatter();
      await this.shown;
      if (current()) this.chart = C.scatter($('#trials-chart'), { ...data, xLabel: 'Trial No.', yLabel: 'default metric', emptyText: 'No succeeded trial yet' });
    } else if (tab === 'duration') {
      const c = await columns(['seq', 'status', 'duration', 'start']);
      await this.shown;
      if (!current()) return;
      const x = [], y = [], ids = [], colors = [];
      for (let i = 0; i < c.id.length; i++) {
        const v = durationOf({ duration: c.duration[i], start: c.start[i], status: c.status[i] });
        if (v === null) continue;
        x.push(c.seq[i]); y.push(v); ids.push(c.id[i]); colors.push(C.STATUS_COLORS[c.status[i]]);
      }
      this.chart = C.bars($('#trials-chart'), { x, y, ids, colors, xLabel: 'Trial No.', yLabel: 'duration (s)' });
    } else if (tab === 'params') {
      const keys = (S.exp && S.exp.paramKeys) || [];
      // (at most PARALLEL_LINES lines, evenly spaced from the best to the worst: more only blur into each other)
      const c = await columns(['seq', 'metric', ...keys.map((k) => 'param:' + k)], { status: 'SUCCEEDED', sort: bestFirst(), max: PARALLEL_LINES });
      await this.shown;
      if (!current()) return;
      const rows = [];
      for (let i = 0; i < c.id.length; i++) {
        if (c.metric[i] === null) continue;
        const params = {};
        for (const k of keys) { const v = c['param:' + k][i]; if (v !== null) params[k] = v; }
        rows.push({ id: c.id[i], seq: c.seq[i], status: 'SUCCEEDED', metric: c.metric[i], params });
      }
      this.drawParallel($('#trials-chart'), rows, c.total);
    } else {
      await this.drawIntermediate($('#trials-chart'), current);
    }
  },
  // rows: the succeeded trials with a metric, best first
  drawParallel(cv, scoredRows, total) {
    const names = this.axisNames();
    $('#axes-list').innerHTML = names.map((n) => `<label><input type="checkbox" data-axis="${esc(n)}" ${(this.axesChosen || names).includes(n) ? 'checked' : ''}> ${esc(n)}</label>`).join('');
    let rows = scoredRows;
    if (this.topPct < 100) rows = rows.slice(0, Math.max(1, Math.ceil((rows.length * this.topPct) / 100)));
    const chosen = (this.axesChosen || names).filter((n) => names.includes(n));
    const axes = chosen.map((n) => {
      if (n === 'metric') return { name: 'default metric', kind: 'num', get: (t) => t.metric };
      const get = (t) => (t.params ? t.params[n] : undefined);
      const numeric = rows.every((t) => { const v = get(t); return v === undefined || (typeof v === 'number'); });
      if (numeric) {
        const [lo, hi] = C.extent(rows.map(get));
        const log = lo > 0 && hi / lo >= 100;  // e.g. a loguniform learning rate
        return { name: n + (log ? ' (log)' : ''), kind: 'num', log, get };
      }
      const cats = [...new Set(rows.map((t) => String(typeof get(t) === 'object' ? JSON.stringify(get(t)) : get(t))))].sort();
      return { name: n, kind: 'cat', cats, get: (t) => { const v = get(t); return typeof v === 'object' ? JSON.stringify(v) : v; } };
    });
    const [lo, hi] = C.extent(rows.map((t) => t.metric));
    const max = maximize();
    this.chart = C.parallel(cv, {
      axes, rows, highlight: S.sel,
      color: (t) => (t.metric === null ? null : max ? (t.metric - lo) / (hi - lo || 1) : (hi - t.metric) / (hi - lo || 1)),
      emptyText: 'No succeeded trial yet',
    });
    const shown = scoredRows.length >= total ? `${rows.length} trials`
      : `${rows.length} of ${Math.max(1, Math.ceil((total * this.topPct) / 100))} trials (a sample, evenly spaced by rank)`;
    $('#chart-legend').innerHTML = `<span><i style="background:${C.ramp(0)}"></i>worst</span><span><i style="background:${C.ramp(1)}"></i>best</span>
      <span class="muted">${shown}${S.sel.size ? ' · selected in red' : ''}</span>`;
    if (window.__nnix.parcoordsPaint === null && rows.length && !S.loading) markPaint('parcoordsPaint', 'nnix:parcoords');
  },
  async interIds() {
    if (this.interMode === 'all') return null;
    if (this.interMode === 'sel') return [...S.sel];
    const n = this.interMode === 'top50' ? 50 : 10;
    const [top, running] = await Promise.all([topTrials(n), (S.exp.counts || {}).RUNNING ? trialPage({ status: 'RUNNING', limit: 20 }).then((p) => p.items) : []]);
    return [...new Set([...top.map((t) => t.id), ...running.map((t) => t.id), ...S.sel])];
  },
  async drawIntermediate(cv, current) {
    const ids = await this.interIds();
    if (!current()) return;
    const key = ids === null ? 'all' : ids.slice().sort().join(',');
    if (key !== S.curveKey) {
      if (ids !== null && ids.length === 0) { S.curves = new Map(); S.curveKey = key; }
      else {
        S.curveKey = key;
        try {
          const q = ids === null ? '?maxPoints=40' : `?maxPoints=400&trials=${ids.map(encodeURIComponent).join(',')}`;
          const data = await api('/intermediate' + q);
          if (S.curveKey !== key) return;
          S.curves = new Map(data.trials.map((c) => [c.id, { x: c.x, y: c.y }]));
        } catch (err) { S.curveKey = ''; toast('Cannot load intermediate results: ' + err.message, 'error'); return; }
      }
    }
    const hot = [], faint = [];
    let i = 0;
    const emph = ids === null ? S.sel : new Set(ids);
    for (const [id, c] of S.curves) {
      const t = S.trials.get(id);
      const s = { id, x: c.x, y: c.y, label: t ? `#${t.seq} ${id}` : id };
      if (emph.has(id) && (ids !== null || S.sel.has(id))) { s.color = C.PALETTE[i++ % C.PALETTE.length]; s.width = S.sel.has(id) ? 2.6 : 1.6; hot.push(s); }
      else faint.push(s);
    }
    await this.shown;
    if (this.tab !== 'inter' || !current()) return;
    this.chart = C.lines(cv, { series: hot, faint, xLabel: 'step (sequence)', yLabel: 'intermediate result', emptyText: ids && !ids.length ? 'Select trials in the table' : 'No intermediate results yet' });
    $('#chart-legend').innerHTML = hot.slice(0, 24).map((s) => `<span><i style="background:${s.color || '#1f6fb2'}"></i>${esc(s.label)}</span>`).join('');
  },
};

// ---- trial actions, detail drawer, compare -------------------------------------------------------
async function killTrial(id) {
  const t = S.trials.get(id);
  if (!(await confirmDialog(`Kill trial #${t ? t.seq : ''} ${id}? It becomes USER_CANCELED.`, 'Kill'))) return;
  try {
    const r = await api(`/trials/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
    toast(r.canceled ? `Trial ${id}: kill requested` : `Trial ${id} is not running (${r.status})`);
  } catch (err) { toast(`Cannot kill ${id}: ${err.message}`, 'error'); }
}

function openTrial(id) { location.hash = '#/trial/' + encodeURIComponent(id); }

const detail = {
  id: null, data: null, sig: '', log: 'stdout', logTimer: null, fetching: false,
  async open(id) {
    this.id = id; this.data = null; this.sig = '';
    const known = S.trials.get(id);  // an ended trial that did not succeed: its stderr says why
    this.log = known && !ACTIVE.has(known.status) && known.status !== 'SUCCEEDED' ? 'stderr' : 'stdout';
    const el = $('#drawer');
    el.hidden = false;
    el.innerHTML = '<p class="muted">Loading…</p>';
    await this.fetch();
    clearInterval(this.logTimer);
    this.logTimer = setInterval(() => { const t = S.trials.get(this.id); if (t && t.status === 'RUNNING') this.loadLog(); }, 3000);
  },
  close() {
    this.id = null; clearInterval(this.logTimer);
    $('#drawer').hidden = true; $('#drawer').innerHTML = '';
  },
  async fetch() {
    if (this.fetching || !this.id) return;
    this.fetching = true;
    const id = this.id;
    try {
      this.data = await api('/trials/' + encodeURIComponent(id));
      const t = S.trials.get(id);
      this.sig = t ? `${t.status}|${t.nInter}|${t.end}|${t.warnings}` : '';
      if (this.id === id) this.render();
    } catch (err) {
      if (this.id === id) $('#drawer').innerHTML = `<button class="close" id="detail-close">✕</button><p class="err">${esc(err.message)}</p>`;
      $('#detail-close') && ($('#detail-close').onclick = () => history.back());
    } finally { this.fetching = false; }
  },
  refresh() {
    const t = S.trials.get(this.id);
    if (!t) return;
    const sig = `${t.status}|${t.nInter}|${t.end}|${t.warnings}`;
    if (sig !== this.sig && !this.fetching) {
      clearTimeout(this.refreshTimer);
      this.refreshTimer = setTimeout(() => this.fetch(), 400);
    }
  },
  render() {
    const d = this.data;
    const active = ACTIVE.has(d.status);
    const inter = d.metrics.filter((m) => m.type === 'PERIODICAL');
    const final = d.metrics.filter((m) => m.type === 'FINAL');
    const el = $('#drawer');
    const scroll = el.scrollTop;
    el.innerHTML = `<button class="close" id="detail-close" title="close">✕</button>
      <h2>Trial #${d.seq} <code>${esc(d.id)}</code></h2>
      <div><span class="st st-${d.status}" id="detail-status">${d.status}</span></div>
      ${d.message ? `<div class="reason section ${d.status === 'FAILED' ? 'err' : 'muted'}" id="detail-reason">${esc(d.message)}${d.exitCode !== null && d.exitCode !== undefined && !String(d.message).includes('exit code') ? ` (exit code ${esc(d.exitCode)})` : ''}</div>` : ''}
      ${d.warnings ? `<div class="section err" id="detail-warnings" title="bad metric lines are skipped; leftover processes are killed">⚠ ${d.warnings} warning${d.warnings === 1 ? '' : 's'}<ul>${(d.warningMessages || []).map((w) => `<li>${esc(w)}</li>`).join('')}</ul></div>` : ''}
      <dl class="kv section"><dt>Default metric</dt><dd id="detail-metric">${esc(C.fmt(d.metric))}</dd>
        <dt>Final result</dt><dd class="mono">${final.length ? esc(JSON.stringify(final[final.length - 1].value)) : '–'}</dd>
        <dt>Duration</dt><dd>${fmtDur(durationOf(d))}</dd><dt>Start</dt><dd>${fmtTime(d.start)}</dd><dt>End</dt><dd>${fmtTime(d.end)}</dd>
        <dt>Source</dt><dd>${esc(d.source)}${d.parameterId !== null ? ` (parameter id ${d.parameterId})` : ''}</dd>
        <dt>Output</dt><dd class="mono">${esc(d.outputDir || '–')}</dd>${d.gpus ? `<dt>GPUs</dt><dd>${esc(d.gpus.join(', '))}</dd>` : ''}</dl>
      <div class="section write">${active ? '<button class="danger" id="detail-kill">Kill</button> ' : ''}<button id="detail-rerun">Re-run with edited parameters…</button></div>
      <h3 class="section">Parameters <button class="small" id="copy-params">Copy as JSON</button></h3>
      <pre id="detail-params">${esc(JSON.stringify(d.params, null, 2))}</pre>
      <h3 class="section">Intermediate results <span class="muted" id="detail-inter-count">(${d.metricsSampled && typeof d.nInter === 'number' ? `${d.nInter}; ${inter.length} shown, evenly spread` : inter.length})</span></h3>
      <div class="chart-wrap"><canvas class="chart small" id="detail-chart"></canvas><div class="tooltip" hidden></div></div>
      <h3 class="section">Logs</h3>
      <div class="tabs" id="log-tabs">${['stdout', 'stderr', 'trial.log'].map((n) => `<button data-log="${n}" class="${n === this.log ? 'active' : ''}">${n}${d.logs && d.logs[n] !== null && d.logs[n] !== undefined ? ` <span class="muted">(${d.logs[n]} B)</span>` : ''}</button>`).join('')}
        <button id="log-refresh" title="reload">↻</button></div>
      <pre class="log" id="log-view">…</pre>`;
    el.scrollTop = scroll;
    $('#detail-close').onclick = () => closeDetail();
    if ($('#detail-kill')) $('#detail-kill').onclick = () => killTrial(d.id);
    $('#detail-rerun').onclick = () => rerun(d);
    $('#copy-params').onclick = () => { navigator.clipboard && navigator.clipboard.writeText(JSON.stringify(d.params)); toast('Parameters copied'); };
    $('#log-tabs').onclick = (ev) => {
      const b = ev.target.closest('button[data-log]');
      if (b) { this.log = b.dataset.log; for (const x of document.querySelectorAll('#log-tabs button[data-log]')) x.classList.toggle('active', x === b); this.loadLog(); }
    };
    $('#log-refresh').onclick = () => this.loadLog();
    const pts = inter.map((m) => ({ x: m.sequence, y: typeof m.value === 'number' ? m.value : m.value && m.value.default })).filter((p) => typeof p.y === 'number');
    const cv = $('#detail-chart');
    const chart = C.lines(cv, { series: [{ id: d.id, x: pts.map((p) => p.x), y: pts.map((p) => p.y), label: d.id }] });
    C.interact(cv, cv.nextElementSibling, () => chart, (h) => `step ${h.x}: ${C.fmt(h.y)}`);
    this.loadLog();
  },
  async loadLog() {
    const id = this.id, name = this.log;
    if (!id) return;
    try {
      const r = await api(`/trials/${encodeURIComponent(id)}/logs/${name}`, { raw: true });
      const text = await r.text();
      const skipped = Number(r.headers.get('X-Nnix-Skipped') || 0);
      if (this.id !== id || this.log !== name) return;
      const view = $('#log-view');
      if (!view) return;
      const atBottom = view.scrollHeight - view.scrollTop - view.clientHeight < 30;
      view.textContent = (skipped ? `… (${skipped} earlier bytes not shown)\n` : '') + (text || (r.headers.get('X-Nnix-Missing') ? `(no ${name} yet)` : `(${name} is empty)`));
      if (atBottom) view.scrollTop = view.scrollHeight;
    } catch (err) { const v = $('#log-view'); if (v) v.textContent = 'cannot load: ' + err.message; }
  },
};

function closeDetail() {
  if (location.hash.startsWith('#/trial/')) location.hash = '#/trials';
  else detail.close();
}

function rerun(d) {
  modal(`<h3>Re-run trial #${d.seq} with edited parameters</h3>
    <p class="muted">Submitted as a new <i>customized</i> trial; it counts against maxTrialNumber.</p>
    <textarea class="params mono" id="rerun-params">${esc(JSON.stringify(d.params, null, 2))}</textarea>
    <div id="rerun-msg" class="err"></div>
    <div class="modal-actions"><button id="rerun-cancel">Cancel</button><button id="rerun-submit" class="primary">Submit trial</button></div>`,
  (box, close) => {
    $('#rerun-cancel', box).onclick = close;
    $('#rerun-submit', box).onclick = async () => {
      let params;
      try { params = JSON.parse($('#rerun-params', box).value); } catch (err) { $('#rerun-msg', box).textContent = 'not valid JSON: ' + err.message; return; }
      if (!params || typeof params !== 'object' || Array.isArray(params)) { $('#rerun-msg', box).textContent = 'the parameters must be a JSON object'; return; }
      try {
        const t = await api('/trials', { method: 'POST', body: { parameters: params } });
        close(); toast(`Trial #${t.seq} (${t.id}) added`);
        S.trials.set(t.id, t); S.version++; changed();
      } catch (err) { $('#rerun-msg', box).textContent = err.message; }
    };
  });
}

async function openCompare(ids) {
  // (a trial not seen yet, e.g. a link opened anew: asked for)
  await Promise.all(ids.filter((id) => !S.trials.has(id)).map((id) => api('/trials/' + encodeURIComponent(id)).then((t) => remember([t])).catch(() => null)));
  const list = ids.map((id) => S.trials.get(id)).filter(Boolean);
  if (list.length < 2) { toast('Select 2 to 5 trials to compare', 'error'); return; }
  const e = S.exp || { paramKeys: [], metricKeys: [] };
  const rows = [
    ['Trial No.', (t) => t.seq], ['ID', (t) => t.id], ['Status', (t) => t.status], ['Default metric', (t) => C.fmt(t.metric)],
    ['Duration', (t) => fmtDur(durationOf(t))], ['#Intermediate', (t) => t.nInter],
    ...(e.paramKeys || []).map((k) => [k, (t) => (t.params && k in t.params ? JSON.stringify(t.params[k]) : '')]),
    ...(e.metricKeys || []).filter((k) => k !== 'default').map((k) => [k + ' (final)', (t) => C.fmt(finalKey(t, k))]),
  ];
  const close = modal(`<h3>Compare trials</h3><table class="plain" id="compare-table">
    ${rows.map(([name, get]) => `<tr><th>${esc(name)}</th>${list.map((t) => `<td>${esc(get(t))}</td>`).join('')}</tr>`).join('')}</table>
    <h3 class="section">Intermediate results</h3><div class="chart-wrap" style="min-width:640px"><canvas class="chart" id="compare-chart"></canvas><div class="tooltip" hidden></div></div>
    <div class="legend" id="compare-legend"></div><div class="modal-actions"><button id="compare-close">Close</button></div>`,
  (box, closeFn) => { $('#compare-close', box).onclick = () => { closeFn(); if (location.hash.startsWith('#/compare')) location.hash = '#/trials'; }; });
  try {
    const data = await api(`/intermediate?maxPoints=500&trials=${list.map((t) => encodeURIComponent(t.id)).join(',')}`);
    const byId = new Map(data.trials.map((c) => [c.id, c]));
    const series = list.map((t, i) => ({ id: t.id, label: `#${t.seq} ${t.id}`, color: C.PALETTE[i], x: (byId.get(t.id) || { x: [] }).x, y: (byId.get(t.id) || { y: [] }).y }));
    const cv = $('#compare-chart');
    if (!cv) return;
    const chart = C.lines(cv, { series, xLabel: 'step', yLabel: 'intermediate result' });
    C.interact(cv, cv.nextElementSibling, () => chart, (h) => `${h.label}\nstep ${h.x}: ${C.fmt(h.y)}`);
    $('#compare-legend').innerHTML = series.map((s) => `<span><i style="background:${s.color}"></i>${esc(s.label)}</span>`).join('');
  } catch (err) { toast('Cannot load curves: ' + err.message, 'error'); close(); }
}

// ---- All experiments -----------------------------------------------------------------------------
const experiments = {
  enter(main) {
    main.innerHTML = `<div class="toolbar"><input id="exp-search" type="search" placeholder="Search name or id">
      <select id="exp-status-filter"><option value="">all statuses</option>${['RUNNING', 'VIEWED', 'DONE', 'STOPPED', 'ERROR', 'NO_MORE_TRIAL', 'TUNER_NO_MORE_TRIAL'].map((s) => `<option>${s}</option>`).join('')}</select>
      <button id="exp-refresh">Refresh</button><span class="muted" id="exp-count"></span></div>
      <div class="card"><table class="plain" id="exp-table"><thead><tr><th>Name</th><th>ID</th><th>Status</th><th>Port</th><th>Platform</th><th>Start</th><th>End</th><th></th></tr></thead><tbody></tbody></table></div>
      <p class="muted">Stopped experiments can be browsed with <code>nnix view ID</code>.</p>`;
    this.list = [];
    $('#exp-search').oninput = () => this.render();
    $('#exp-status-filter').onchange = () => this.render();
    $('#exp-refresh').onclick = () => this.load();
    this.timer = setInterval(() => this.load(), 5000);
    this.load();
  },
  leave() { clearInterval(this.timer); },
  async load() {
    try { this.list = await api('/experiments'); this.render(); } catch (err) { toast('Cannot list experiments: ' + err.message, 'error'); }
  },
  render() {
    const q = $('#exp-search').value.trim().toLowerCase(), st = $('#exp-status-filter').value;
    const rows = this.list.filter((e) => (!q || e.id.toLowerCase().includes(q) || (e.name || '').toLowerCase().includes(q)) && (!st || e.status === st))
      .sort((a, b) => (b.startTime || 0) - (a.startTime || 0));
    $('#exp-count').textContent = `${rows.length} of ${this.list.length}`;
    $('#exp-table tbody').innerHTML = rows.map((e) => `<tr data-id="${esc(e.id)}"><td>${esc(e.name || '–')}</td>
      <td><code>${esc(e.id)}</code>${e.current ? ' <span class="badge">this</span>' : ''}</td><td class="st st-${esc(e.status)}">${esc(e.status)}</td>
      <td>${e.port ?? '–'}</td><td>${esc(e.platform)}</td><td>${fmtTime(e.startTime)}</td><td>${fmtTime(e.endTime)}</td>
      <td>${e.current ? '<a href="#/overview">open</a>' : e.url ? `<a href="${esc(e.url)}" target="_blank" rel="noopener">open</a>` : `<span class="muted" title="nnix view ${esc(e.id)}">not served</span>`}</td></tr>`).join('');
  },
};

// ---- TensorBoard and the manager's logs ----------------------------------------------------------
const NNI_API = '/api/v1/nni';

async function openTensorboard(ids) {
  if (!ids.length) return;
  const close = modal(`<h3>TensorBoard</h3><p class="muted" id="tb-status">Starting TensorBoard on ${ids.length} trial(s)…</p>
    <div id="tb-body"></div><div class="modal-actions"><button id="tb-close">Close</button></div>`, (box, done) => {
    $('#tb-close', box).onclick = done;
  });
  try {
    const info = await api('/tensorboard', { method: 'POST', body: { trials: ids.join(',') }, base: NNI_API });
    showTensorboard(info);
  } catch (err) {
    const st = $('#tb-status');
    if (st) { st.className = 'err'; st.textContent = 'Cannot start TensorBoard: ' + err.message; }
    else { close(); toast('Cannot start TensorBoard: ' + err.message, 'error'); }
  }
}

function showTensorboard(info) {
  const st = $('#tb-status'), body = $('#tb-body');
  if (!st || !body) return;
  st.className = info.status === 'ERROR' ? 'err' : '';
  st.textContent = `TensorBoard ${info.id}: ${info.status}${info.message ? ' — ' + info.message : ''}`;
  body.innerHTML = `<p><a id="tb-url" href="${esc(info.url)}" target="_blank" rel="noopener">${esc(info.url)}</a></p>
    <p class="muted">It listens on 127.0.0.1 of the experiment's machine and stops with the experiment.</p>
    <details><summary>Log directories (${info.trialLogDirectoryList.length})</summary><pre>${esc(info.trialJobIdList.map((t, i) => t + ': ' + info.trialLogDirectoryList[i]).join('\n'))}</pre></details>
    <div class="modal-actions"><button id="tb-stop" class="danger">Stop TensorBoard</button></div>`;
  $('#tb-stop').onclick = async () => {
    try { showTensorboard(await api('/tensorboard/' + encodeURIComponent(info.id), { method: 'DELETE', base: NNI_API })); }
    catch (err) { toast('Cannot stop TensorBoard: ' + err.message, 'error'); }
  };
}

const LOG_FILES = [['manager.log', 'Manager log'], ['nnictl_stdout.log', 'Daemon stdout'], ['nnictl_stderr.log', 'Daemon stderr']];
const LOG_TAIL = 256 * 1024;

function openLogs() {
  modal(`<h3>Logs</h3><div class="tabs" id="logs-tabs">${LOG_FILES.map(([f, t]) => `<button data-file="${f}">${t}</button>`).join('')}
    <button id="logs-refresh" title="reload">↻</button></div>
    <pre class="log" id="logs-view" style="min-width:70vw;max-height:60vh">…</pre>
    <div class="modal-actions"><a id="logs-download" href="#" download>Download</a><button id="logs-close">Close</button></div>`,
  (box, close) => {
    let file = LOG_FILES[0][0];
    const load = async () => {
      for (const b of box.querySelectorAll('#logs-tabs button[data-file]')) b.classList.toggle('active', b.dataset.file === file);
      $('#logs-download', box).href = '/logs/' + file + '?download=1';
      const view = $('#logs-view', box);
      try {
        const text = await api('/logs/' + file + '?tail=' + LOG_TAIL, { base: '' });
        view.textContent = text || '(empty)';
        view.scrollTop = view.scrollHeight;
      } catch (err) { view.textContent = err.status === 404 ? '(no such file yet)' : 'Cannot load: ' + err.message; }
    };
    $('#logs-tabs', box).onclick = (ev) => { const b = ev.target.closest('button[data-file]'); if (b) { file = b.dataset.file; load(); } };
    $('#logs-refresh', box).onclick = load;
    $('#logs-close', box).onclick = close;
    load();
  });
}

// ---- router --------------------------------------------------------------------------------------
const PAGES = { overview, trials, experiments };

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  let name = parts[0] || 'overview', arg = parts.slice(1).join('/');
  let trialId = null, compareIds = null;
  if (name === 'trial') { trialId = decodeURIComponent(arg); name = 'trials'; arg = ''; }
  if (name === 'compare') { compareIds = arg.split(',').map(decodeURIComponent); name = 'trials'; arg = ''; }
  if (!PAGES[name]) name = 'overview';
  const switching = name !== S.pageName || (name === 'trials' && arg && arg !== (S.page && S.page.tab));
  if (switching) {
    if (S.page && S.page.leave) S.page.leave();
    S.pageName = name; S.page = PAGES[name];
    for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.dataset.page === name);
    S.page.enter($('#main'), arg);
  }
  if (trialId) detail.open(trialId); else if (detail.id) detail.close();
  if (compareIds) openCompare(compareIds);
}

document.addEventListener('keydown', (ev) => {
  if (ev.key !== 'Escape') return;
  if (!$('#modal').hidden) { $('#modal').hidden = true; $('#modal-box').innerHTML = ''; } else if (detail.id) closeDetail();
});

initToken();
$('#btn-logs').onclick = openLogs;
window.addEventListener('hashchange', route);
route();
reload().then(() => connect());
