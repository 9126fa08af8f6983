// A table whose rows are keyed, so a poll updates numbers in place: a cell whose value
// did not change is not touched, a row that went away is removed, a new one is added.
// Nothing flickers and a selection or an open tooltip survives the refresh.
import {h} from './dom.js';

/**
 * new Table(columns, {key, rowClass, empty})
 *   columns: [{label, cls, title, cell(row) -> string | number | Node | null}]
 *   key(row) -> a string identifying the row across polls
 *   rowClass(row) -> extra class names for the <tr> ("error", "paused", "total")
 * table.update(rows, footRows) renders rows (and optional total rows at the bottom).
 */
export class Table {
  constructor(columns, {key, rowClass = () => '', caption = null} = {}) {
    this.columns = columns;
    this.key = key;
    this.rowClass = rowClass;
    this.el = h('table.grid');
    if (caption) this.el.append(h('caption', null, caption));
    this.thead = h('thead');
    this.tbody = h('tbody');
    this.tfoot = h('tfoot');
    this.el.append(this.thead, this.tbody, this.tfoot);
    this.rows = new Map();
    this.setColumns(columns);
  }

  /** Change the columns (e2e percentiles appear once a broker reports them). */
  setColumns(columns, groups = null) {
    this.columns = columns;
    const signature = JSON.stringify([columns.map((c) => c.label), groups]);
    if (signature === this.signature) return;
    this.signature = signature;
    this.thead.replaceChildren();
    if (groups) {
      this.thead.append(h('tr.groups', null, groups.map(
        (g) => h(`th${g.cls ? '.' + g.cls : ''}`, {colspan: g.span}, g.label || ''))));
    }
    this.thead.append(h('tr', null, columns.map(
      (c) => h(`th${c.cls ? '.' + c.cls : ''}`, {title: c.title}, c.label))));
    this.tbody.replaceChildren();
    this.tfoot.replaceChildren();
    this.rows.clear();
  }

  /** Render rows in order, reusing the <tr> of every key seen before. */
  update(rows, footRows = []) {
    const seen = new Set();
    let previous = null;
    for (const row of rows) {
      const k = this.key(row);
      seen.add(k);
      let tr = this.rows.get(k);
      if (!tr) {
        tr = h('tr', {dataset: {key: k}}, this.columns.map((c) => h(`td${c.cls ? '.' + c.cls : ''}`)));
        this.rows.set(k, tr);
      }
      this.fill(tr, row);
      const want = previous ? previous.nextSibling : this.tbody.firstChild;
      if (want !== tr) this.tbody.insertBefore(tr, want);
      previous = tr;
    }
    for (const [k, tr] of this.rows) {
      if (!seen.has(k)) { tr.remove(); this.rows.delete(k); }
    }
    this.renderFoot(footRows);
  }

  /** The total rows at the bottom (reused like the body's, by position). */
  renderFoot(footRows) {
    while (this.tfoot.children.length > footRows.length) this.tfoot.lastChild.remove();
    footRows.forEach((row, i) => {
      let tr = this.tfoot.children[i];
      if (!tr) {
        tr = h('tr', null, this.columns.map((c) => h(`td${c.cls ? '.' + c.cls : ''}`)));
        this.tfoot.append(tr);
      }
      this.fill(tr, row);
    });
  }

  /** Set each cell of tr from row, touching only the cells whose content changed. */
  fill(tr, row) {
    const cls = ['', this.rowClass(row)].join(' ').trim();
    if (tr.className !== cls) tr.className = cls;
    this.columns.forEach((c, i) => setCell(tr.children[i], c.cell(row)));
  }
}

/** Put value into td: text when it is a string or number, else the node (only if different). */
export function setCell(td, value) {
  if (value === null || value === undefined) value = '';
  if (!(value instanceof Node)) {
    const text = String(value);
    if (td.childElementCount || td.textContent !== text) td.textContent = text;
    return;
  }
  const holder = document.createElement('div');
  holder.append(value.cloneNode(true));
  // Nodes built by h() carry no data in innerHTML form other than escaped text, so
  // comparing the serialized markup is a safe way to skip an unchanged cell.
  if (td.innerHTML !== holder.innerHTML) td.replaceChildren(value);
}
