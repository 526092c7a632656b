// Canvas charts for the nnix UI: scatter, lines, parallel coordinates, bars.
// Everything is drawn in a few batched paths (one per colour bucket), so 10,000 trials with
// 100 points each stay interactive; series are downsampled to the plot's pixel width.

export const PAD = { l: 60, r: 18, t: 16, b: 36 };
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#17becf', '#bcbd22', '#7f7f7f'];
export const STATUS_COLORS = {
  SUCCEEDED: '#2e8b57', RUNNING: '#1f6fb2', WAITING: '#8a8f98', FAILED: '#c0392b',
  USER_CANCELED: '#b7791f', SYS_CANCELED: '#b7791f', EARLY_STOPPED: '#d68910', UNKNOWN: '#999',
};

export function ramp(t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const x = t * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const a = RAMP[i], b = RAMP[i + 1];
  return `rgb(${Math.round(a[0] + (b[0] - a[0]) * f)},${Math.round(a[1] + (b[1] - a[1]) * f)},${Math.round(a[2] + (b[2] - a[2]) * f)})`;
}

export function fmt(v, digits = 6) {
  if (v === null || v === undefined) return '–';
  if (typeof v !== 'number') return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e12) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-4 || a >= 1e9)) return v.toExponential(3);
  return String(Number(v.toPrecision(digits)));
}

export function setup(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, h = canvas.clientHeight || 300;
  const W = Math.round(w * dpr), H = Math.round(h * dpr);
  if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = '11px system-ui, sans-serif';
  return { ctx, w, h };
}

export function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) {
    if (typeof v === 'number' && Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  }
  if (lo === Infinity) return [0, 1];
  if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; return [lo - d, hi + d]; }
  return [lo, hi];
}

export function ticks(lo, hi, n = 5) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

function frame(ctx, w, h, xr, yr, xLabel, yLabel, intX = false) {
  const pw = w - PAD.l - PAD.r, ph = h - PAD.t - PAD.b;
  const sx = (x) => PAD.l + ((x - xr[0]) / (xr[1] - xr[0])) * pw;
  const sy = (y) => PAD.t + ph - ((y - yr[0]) / (yr[1] - yr[0])) * ph;
  ctx.strokeStyle = '#e6eaef'; ctx.fillStyle = '#5a6470'; ctx.lineWidth = 1;
  ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
  for (const t of ticks(yr[0], yr[1], 5)) {
    const y = Math.round(sy(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(PAD.l, y); ctx.lineTo(w - PAD.r, y); ctx.stroke();
    ctx.fillText(fmt(t, 4), PAD.l - 6, y);
  }
  ctx.textAlign = 'center'; ctx.textBaseline = 'top';
  for (const t of ticks(xr[0], xr[1], Math.max(2, Math.floor(pw / 80))).filter((v) => !intX || Number.isInteger(v))) {
    const x = Math.round(sx(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, PAD.t + ph); ctx.lineTo(x, PAD.t + ph + 4); ctx.stroke();
    ctx.fillText(fmt(t, 4), x, PAD.t + ph + 6);
  }
  ctx.strokeStyle = '#9aa5b1';
  ctx.beginPath(); ctx.moveTo(PAD.l + 0.5, PAD.t); ctx.lineTo(PAD.l + 0.5, PAD.t + ph + 0.5); ctx.lineTo(w - PAD.r, PAD.t + ph + 0.5); ctx.stroke();
  ctx.fillStyle = '#3d4752';
  if (xLabel) { ctx.textAlign = 'center'; ctx.textBaseline = 'bottom'; ctx.fillText(xLabel, PAD.l + pw / 2, h - 2); }
  if (yLabel) {
    ctx.save(); ctx.translate(12, PAD.t + ph / 2); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center'; ctx.textBaseline = 'middle'; ctx.fillText(yLabel, 0, 0); ctx.restore();
  }
  return { sx, sy, pw, ph };
}

function empty(ctx, w, h, text) {
  ctx.fillStyle = '#8a95a1'; ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
  ctx.font = '13px system-ui, sans-serif'; ctx.fillText(text, w / 2, h / 2);
}

// points: [{x, y, id, color?}], best: [[x, y], ...] step line
function padded([lo, hi], f = 0.03) { const d = (hi - lo) * f; return [lo - d, hi + d]; }

export function scatter(canvas, { points, best, xLabel, yLabel, emptyText }) {
  const { ctx, w, h } = setup(canvas);
  if (!points.length) { empty(ctx, w, h, emptyText || 'No data yet'); return { pick: () => null }; }
  const xr = padded(extent(points.map((p) => p.x))), yr = padded(extent(points.map((p) => p.y)));
  const { sx, sy } = frame(ctx, w, h, xr, yr, xLabel, yLabel, true);
  const screen = new Float32Array(points.length * 2);
  const byColor = new Map();
  points.forEach((p, i) => {
    const X = sx(p.x), Y = sy(p.y);
    screen[2 * i] = X; screen[2 * i + 1] = Y;
    const c = p.color || '#1f6fb2';
    if (!byColor.has(c)) byColor.set(c, []);
    byColor.get(c).push(i);
  });
  const r = points.length > 3000 ? 1.5 : 2.5;
  for (const [c, idx] of byColor) {
    ctx.fillStyle = c; ctx.globalAlpha = points.length > 3000 ? 0.6 : 0.85;
    for (const i of idx) ctx.fillRect(screen[2 * i] - r, screen[2 * i + 1] - r, 2 * r, 2 * r);
  }
  ctx.globalAlpha = 1;
  if (best && best.length) {
    ctx.strokeStyle = '#e4572e'; ctx.lineWidth = 1.6; ctx.beginPath();
    best.forEach(([x, y], i) => {
      const X = sx(x), Y = sy(y);
      if (i === 0) ctx.moveTo(X, Y);
      else { ctx.lineTo(X, sy(best[i - 1][1])); ctx.lineTo(X, Y); }
    });
    ctx.lineTo(sx(xr[1]), sy(best[best.length - 1][1]));
    ctx.stroke();
  }
  return {
    pick(mx, my) {
      let bi = -1, bd = 64;
      for (let i = 0; i < points.length; i++) {
        const dx = screen[2 * i] - mx, dy = screen[2 * i + 1] - my, d = dx * dx + dy * dy;
        if (d < bd) { bd = d; bi = i; }
      }
      return bi < 0 ? null : points[bi];
    },
  };
}

// Min/max per pixel column: what a line at this width can show.
function thin(xs, ys, sx, maxPts) {
  if (xs.length <= maxPts) return [xs, ys];
  const ox = [], oy = [];
  let col = null, lo = 0, hi = 0;
  const flush = () => {
    if (col === null) return;
    if (lo === hi) { ox.push(xs[lo]); oy.push(ys[lo]); } else if (lo < hi) {
      ox.push(xs[lo], xs[hi]); oy.push(ys[lo], ys[hi]);
    } else { ox.push(xs[hi], xs[lo]); oy.push(ys[hi], ys[lo]); }
  };
  for (let i = 0; i < xs.length; i++) {
    const c = Math.round(sx(xs[i]));
    if (c !== col) { flush(); col = c; lo = hi = i; } else {
      if (ys[i] < ys[lo]) lo = i;
      if (ys[i] > ys[hi]) hi = i;
    }
  }
  flush();
  return [ox, oy];
}

// series: [{id, x: [], y: [], color, width, label}] ; faint: series drawn thin and pale underneath
export function lines(canvas, { series, faint, xLabel, yLabel, emptyText }) {
  const { ctx, w, h } = setup(canvas);
  const all = (faint || []).concat(series);
  if (!all.some((s) => s.x.length)) { empty(ctx, w, h, emptyText || 'No intermediate results yet'); return { pick: () => null }; }
  const xs = [], ys = [];
  for (const s of all) {
    const ex = extent(s.x), ey = extent(s.y);
    if (s.x.length) { xs.push(ex[0], ex[1]); ys.push(ey[0], ey[1]); }
  }
  const xr = extent(xs), yr = padded(extent(ys));
  const { sx, sy, pw } = frame(ctx, w, h, xr, yr, xLabel, yLabel, true);
  const maxPts = Math.max(50, Math.floor(pw) * 2);
  const drawn = [];
  if (faint && faint.length) {
    ctx.strokeStyle = faint.length > 500 ? 'rgba(90,110,140,0.12)' : 'rgba(90,110,140,0.3)';
    ctx.lineWidth = 1; ctx.beginPath();
    for (const s of faint) {
      const [X, Y] = thin(s.x, s.y, sx, maxPts);
      for (let i = 0; i < X.length; i++) {
        const px = sx(X[i]), py = sy(Y[i]);
        if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      }
      drawn.push({ s, X, Y });
    }
    ctx.stroke();
  }
  for (const s of series) {
    const [X, Y] = thin(s.x, s.y, sx, maxPts);
    ctx.strokeStyle = s.color || '#1f6fb2'; ctx.lineWidth = s.width || 1.8; ctx.beginPath();
    for (let i = 0; i < X.length; i++) {
      const px = sx(X[i]), py = sy(Y[i]);
      if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
    }
    ctx.stroke();
    if (X.length === 1) { ctx.fillStyle = s.color || '#1f6fb2'; ctx.fillRect(sx(X[0]) - 2, sy(Y[0]) - 2, 4, 4); }
    drawn.push({ s, X, Y });
  }
  return {
    pick(mx, my) {
      let best = null, bd = 100;
      for (const d of drawn) {
        for (let i = 0; i < d.X.length; i++) {
          const dx = sx(d.X[i]) - mx, dy = sy(d.Y[i]) - my, dd = dx * dx + dy * dy;
          if (dd < bd) { bd = dd; best = { id: d.s.id, label: d.s.label, x: d.X[i], y: d.Y[i] }; }
        }
      }
      return best;
    },
  };
}

// axes: [{name, kind: 'num'|'cat', log?: bool, cats?: [...], get: (row) => value}], rows: [...], color: (row) => 0..1 | null
export function parallel(canvas, { axes, rows, color, highlight, emptyText }) {
  const { ctx, w, h } = setup(canvas);
  if (!rows.length || axes.length < 2) {
    empty(ctx, w, h, axes.length < 2 ? 'Choose at least two axes' : (emptyText || 'No finished trials yet'));
    return { pick: () => null };
  }
  const top = 30, bottom = h - 26, left = 50, right = w - 60;
  const gap = (right - left) / (axes.length - 1);
  const scales = axes.map((a) => {
    if (a.kind === 'cat') {
      const cats = a.cats;
      const index = new Map(cats.map((c, i) => [c, i]));
      const n = Math.max(1, cats.length - 1);
      return (v) => { const i = index.get(String(v)); return i === undefined ? null : bottom - (cats.length === 1 ? 0.5 : i / n) * (bottom - top); };
    }
    const f = a.log ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
    const [lo, hi] = extent(rows.map((r) => { const v = a.get(r); return typeof v === 'number' ? f(v) : null; }));
    a._range = [lo, hi];
    return (v) => {
      if (typeof v !== 'number') return null;
      const u = f(v);
      return Number.isFinite(u) ? bottom - ((u - lo) / (hi - lo || 1)) * (bottom - top) : null;
    };
  });
  const BUCKETS = 16;
  const paths = Array.from({ length: BUCKETS + 1 }, () => []);
  const ys = new Float32Array(axes.length);
  const hot = [];
  for (const row of rows) {
    let ok = true;
    for (let k = 0; k < axes.length; k++) {
      const y = scales[k](axes[k].get(row));
      if (y === null) { ok = false; break; }
      ys[k] = y;
    }
    if (!ok) continue;
    const c = color(row);
    const b = c === null || c === undefined ? BUCKETS : Math.min(BUCKETS - 1, Math.floor(c * BUCKETS));
    (highlight && highlight.has(row.id) ? hot : paths[b]).push(Array.from(ys));
  }
  const alpha = rows.length > 2000 ? 0.18 : rows.length > 300 ? 0.35 : 0.7;
  ctx.lineWidth = 1;
  paths.forEach((list, b) => {
    if (!list.length) return;
    ctx.strokeStyle = b === BUCKETS ? '#999' : ramp((b + 0.5) / BUCKETS);
    ctx.globalAlpha = alpha; ctx.beginPath();
    for (const p of list) {
      ctx.moveTo(left, p[0]);
      for (let k = 1; k < p.length; k++) ctx.lineTo(left + k * gap, p[k]);
    }
    ctx.stroke();
  });
  ctx.globalAlpha = 1;
  if (hot.length) {
    ctx.strokeStyle = '#e4572e'; ctx.lineWidth = 2.2; ctx.beginPath();
    for (const p of hot) { ctx.moveTo(left, p[0]); for (let k = 1; k < p.length; k++) ctx.lineTo(left + k * gap, p[k]); }
    ctx.stroke();
  }
  ctx.lineWidth = 1; ctx.strokeStyle = '#4a5560'; ctx.fillStyle = '#1d2733';
  axes.forEach((a, k) => {
    const x = Math.round(left + k * gap) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
    ctx.font = '600 11.5px system-ui, sans-serif'; ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
    ctx.fillText(a.name.length > 22 ? a.name.slice(0, 21) + '…' : a.name, x, top - 8);
    ctx.font = '10.5px system-ui, sans-serif'; ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
    ctx.fillStyle = '#5a6470';
    if (a.kind === 'cat') {
      const step = Math.max(1, Math.ceil(a.cats.length / 12));
      a.cats.forEach((c, i) => { if (i % step === 0) ctx.fillText(String(c).slice(0, 14), x + 4, scales[k](c)); });
    } else {
      const [lo, hi] = a._range;
      const ts = a.log ? ticks(lo, hi, 4).filter((t) => Number.isInteger(t)) : ticks(lo, hi, 4);
      for (const t of ts) ctx.fillText(a.log ? fmt(Math.pow(10, t), 3) : fmt(t, 4), x + 4, bottom - ((t - lo) / (hi - lo || 1)) * (bottom - top));
    }
    ctx.fillStyle = '#1d2733';
  });
  return { pick: () => null };
}

// Vertical bars: x (e.g. Trial No.), y (e.g. duration), colors
export function bars(canvas, { x, y, colors, ids, xLabel, yLabel, emptyText }) {
  const { ctx, w, h } = setup(canvas);
  if (!x.length) { empty(ctx, w, h, emptyText || 'No data yet'); return { pick: () => null }; }
  const xr = extent(x); xr[1] += 1;
  const yr = [0, extent(y)[1]];
  const { sx, sy, pw } = frame(ctx, w, h, xr, yr, xLabel, yLabel, true);
  const bw = Math.max(1, Math.min(18, (pw / (xr[1] - xr[0])) * 0.8));
  const base = sy(0);
  for (let i = 0; i < x.length; i++) {
    ctx.fillStyle = colors[i] || '#1f6fb2';
    const top = sy(y[i]);
    ctx.fillRect(sx(x[i]), top, bw, Math.max(1, base - top));
  }
  return {
    pick(mx) {
      let bi = -1, bd = 36;
      for (let i = 0; i < x.length; i++) { const d = Math.abs(sx(x[i]) + bw / 2 - mx); if (d < bd) { bd = d; bi = i; } }
      return bi < 0 ? null : { id: ids[bi], x: x[bi], y: y[bi] };
    },
  };
}

// Tooltip + click on a chart canvas. getChart() returns the last drawn chart (with pick).
export function interact(canvas, tip, getChart, describe, onClick) {
  let pending = false, last = null;
  canvas.addEventListener('mousemove', (ev) => {
    last = ev;
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const chart = getChart();
      const r = canvas.getBoundingClientRect();
      const mx = last.clientX - r.left, my = last.clientY - r.top;
      const hit = chart && chart.pick(mx, my);
      if (!hit) { tip.hidden = true; canvas.style.cursor = ''; return; }
      tip.textContent = describe(hit);
      tip.hidden = false;
      tip.style.left = Math.min(mx + 14, r.width - 200) + 'px';
      tip.style.top = (my + 12) + 'px';
      canvas.style.cursor = onClick ? 'pointer' : '';
    });
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  if (onClick) {
    canvas.addEventListener('click', (ev) => {
      const chart = getChart();
      const r = canvas.getBoundingClientRect();
      const hit = chart && chart.pick(ev.clientX - r.left, ev.clientY - r.top);
      if (hit && hit.id) onClick(hit);
    });
  }
}
