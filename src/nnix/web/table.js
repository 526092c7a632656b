// A virtualized table: only the rows in view (plus a few) exist in the DOM, and only those need to be
// loaded (a paged source: rowAt gives null for a row not loaded yet, onView says which rows are shown).

export function esc(s) {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

export class VTable {
  constructor(root, { rowHeight = 28, onSort, onClick, onAction, onSelect, onView, rowClass, emptyText } = {}) {
    this.root = root;
    this.rh = rowHeight;
    this.onSort = onSort; this.onClick = onClick; this.onAction = onAction; this.onSelect = onSelect;
    this.rowClass = rowClass || (() => '');
    this.emptyText = emptyText || 'Nothing to show';
    this.onView = onView;  // (first, last): the rows about to be shown (a paged source fetches what it lacks)
    this.cols = []; this.count = 0; this.rowAt = () => null; this.sortKey = null; this.desc = false;
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
      if (!id) return;
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

  setRows(rows) { this.setSource(rows.length, (i) => rows[i]); }

  // a source of `count` rows, row i being rowAt(i), or null while it is not loaded (drawn as a placeholder)
  setSource(count, rowAt) {
    this.count = count; this.rowAt = rowAt;
    this.body.style.height = count * this.rh + 'px';
    this.render();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  render() {
    const n = this.count;
    const headH = this.head.offsetHeight || 30;
    const view = this.root.clientHeight || 600;
    const first = Math.max(0, Math.floor((this.root.scrollTop - headH) / this.rh) - 5);
    const count = Math.max(0, Math.min(n - first, Math.ceil(view / this.rh) + 10));
    if (this.onView && n) this.onView(first, first + count - 1);
    while (this.pool.length < count) {
      const el = document.createElement('div');
      el.className = 'vt-row'; el.setAttribute('role', 'row');
      el.style.gridTemplateColumns = this.tpl; el.style.width = this.head.style.width;
      this.body.appendChild(el); this.pool.push(el);
    }
    for (let k = 0; k < this.pool.length; k++) {
      const el = this.pool[k];
      if (k >= count || n === 0) { el.hidden = true; continue; }
      const i = first + k, row = this.rowAt(i);
      el.hidden = false;
      el.style.transform = `translateY(${i * this.rh}px)`;
      if (!row) { el.dataset.id = ''; el.className = 'vt-row loading'; el.innerHTML = '<span class="muted">…</span>'; continue; }
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
