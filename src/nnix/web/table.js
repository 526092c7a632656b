// A virtualized table: only the rows in view (plus a few) exist in the DOM, so 10,000 trials
// scroll and re-sort as fast as 10.

export function esc(s) {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

export class VTable {
  constructor(root, { rowHeight = 28, onSort, onClick, onAction, onSelect, rowClass, emptyText } = {}) {
    this.root = root;
    this.rh = rowHeight;
    this.onSort = onSort; this.onClick = onClick; this.onAction = onAction; this.onSelect = onSelect;
    this.rowClass = rowClass || (() => '');
    this.emptyText = emptyText || 'Nothing to show';
    this.cols = []; this.rows = []; this.sortKey = null; this.desc = false;
    this.pool = [];
    root.classList.add('vt');
    root.innerHTML = '<div class="vt-head" role="row"></div><div class="vt-body" role="rowgroup"></div>';
    this.head = root.firstChild; this.body = root.lastChild;
    this.pending = false;
    root.addEventListener('scroll', () => this.schedule(), { passive: true });
    new ResizeObserver(() => this.schedule()).observe(root);
    this.head.addEventListener('click', (ev) => {
      const cell = ev.target.closest('.vt-hcell');
      if (cell && !cell.classList.contains('nosort') && this.onSort) this.onSort(cell.dataset.key);
    });
    this.body.addEventListener('click', (ev) => {
      const row = ev.target.closest('.vt-row');
      if (!row) return;
      const id = row.dataset.id;
      const act = ev.target.closest('[data-act]');
      if (act) { ev.stopPropagation(); if (this.onAction) this.onAction(act.dataset.act, id, ev); return; }
      const box = ev.target.closest('input[data-sel]');
      if (box) { ev.stopPropagation(); if (this.onSelect) this.onSelect(id, box.checked); return; }
      if (this.onClick) this.onClick(id, ev);
    });
  }

  setColumns(cols) {
    this.cols = cols;
    const tpl = cols.map((c) => (c.width || 120) + 'px').join(' ');
    this.width = cols.reduce((a, c) => a + (c.width || 120), 0);
    this.tpl = tpl;
    this.head.style.gridTemplateColumns = tpl;
    this.head.style.width = Math.max(this.width, this.root.clientWidth - 2) + 'px';
    this.renderHead();
    for (const r of this.pool) { r.style.gridTemplateColumns = tpl; r.style.width = this.head.style.width; }
    this.render();
  }

  setSort(key, desc) { this.sortKey = key; this.desc = desc; this.renderHead(); }

  renderHead() {
    this.head.innerHTML = this.cols.map((c) => {
      const cls = ['vt-hcell', c.sortable === false ? 'nosort' : '', c.cls || '',
        this.sortKey === c.key ? 'sorted' : '', this.sortKey === c.key && this.desc ? 'desc' : ''].join(' ');
      return `<span class="${cls}" data-key="${esc(c.key)}" title="${esc(c.tip || c.title)}">${c.titleHtml || esc(c.title)}</span>`;
    }).join('');
  }

  setRows(rows) {
    this.rows = rows;
    this.body.style.height = rows.length * this.rh + 'px';
    this.render();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  render() {
    const n = this.rows.length;
    const headH = this.head.offsetHeight || 30;
    const view = this.root.clientHeight || 600;
    const first = Math.max(0, Math.floor((this.root.scrollTop - headH) / this.rh) - 5);
    const count = Math.min(n - first, Math.ceil(view / this.rh) + 10);
    while (this.pool.length < count) {
      const el = document.createElement('div');
      el.className = 'vt-row'; el.setAttribute('role', 'row');
      el.style.gridTemplateColumns = this.tpl; el.style.width = this.head.style.width;
      this.body.appendChild(el); this.pool.push(el);
    }
    for (let k = 0; k < this.pool.length; k++) {
      const el = this.pool[k];
      if (k >= count || n === 0) { el.hidden = true; continue; }
      const i = first + k, row = this.rows[i];
      el.hidden = false;
      el.style.transform = `translateY(${i * this.rh}px)`;
      el.dataset.id = row.id;
      el.className = 'vt-row ' + this.rowClass(row);
      el.innerHTML = this.cols.map((c) => `<span class="${c.cls || ''}">${c.html(row)}</span>`).join('');
    }
    let emptyEl = this.body.querySelector('.vt-empty');
    if (n === 0) {
      if (!emptyEl) { emptyEl = document.createElement('div'); emptyEl.className = 'vt-empty'; this.body.appendChild(emptyEl); }
      emptyEl.textContent = this.emptyText;
      this.body.style.height = '60px';
    } else if (emptyEl) emptyEl.remove();
  }
}
