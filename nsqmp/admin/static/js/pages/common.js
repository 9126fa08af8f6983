// Pieces several pages share: headers with breadcrumbs, action buttons that confirm
// before they act, the e2e latency columns, and the rows of brokers that failed.
import {ApiError, url} from '../api.js';
import {confirmAction} from '../confirm.js';
import {alertBox, badge, commafy, h, nanotohuman, quantileLabel, replace} from '../dom.js';

/** A page header: breadcrumbs [[label, href], ...], the title, a slot for badges. */
export function pageHeader(crumbs, title, subtitle = null) {
  const badges = h('span.title-badges');
  const el = h('header.page-header', null,
    crumbs.length ? h('nav.crumbs', null, crumbs.map(([label, href]) => [
      h('a', {href}, label), h('span.sep', null, '/')])) : null,
    h('h1', null, h('span.title-text', null, title), badges),
    subtitle ? h('p.subtitle', null, subtitle) : null);
  return {el, badges};
}

/** A bar of action buttons and a line where their outcome shows. */
export function actionBar() {
  const buttons = h('div.actions-buttons');
  const outcome = h('div.action-outcome', {'aria-live': 'polite'});
  return {el: h('div.actions', null, buttons, outcome), buttons, outcome};
}

/**
 * A button that asks for confirmation (when `confirm` is given), then runs `request`
 * (a function returning the API's promise) and reports the outcome in `outcome`.
 * after(result) runs on success (refresh, navigate away, ...).
 */
export function actionButton(label, kind, {confirm, request, outcome, after, action}) {
  const button = h(`button.btn.btn-${kind}`, {type: 'button', dataset: {action: action || label}}, label);
  button.addEventListener('click', async () => {
    if (confirm && !(await confirmAction(confirm.title, confirm.text, confirm.verb))) return;
    await runAction(button, request, outcome, after);
  });
  return button;
}

/** Run a mutating request for button, reporting success, a partial warning or the error. */
export async function runAction(button, request, outcome, after) {
  button.disabled = true;
  try {
    const result = await request();
    if (outcome) {
      const warn = result && result.message;
      replace(outcome, warn ? alertBox('warning', 'Done, with warnings:', warn)
        : alertBox('success', null, `${button.textContent}: done`));
    }
    if (after) after(result);
  } catch (err) {
    const text = err instanceof ApiError ? `${err.status} ${err.message}` : String(err);
    if (outcome) replace(outcome, alertBox('error', `${button.textContent} failed:`, text));
  } finally {
    button.disabled = false;
  }
}

/** A link to a broker's node page. */
export function nodeLink(node, label = null) {
  return h('a.node', {href: url('/nodes', node)}, label || node);
}

/** The e2e percentile columns (one per quantile any row reports); [] when none do. */
export function e2eColumns(aggregate, pick = (row) => row.e2e_processing_latency) {
  const quantiles = ((aggregate && aggregate.percentiles) || []).map((p) => p.quantile);
  return quantiles.map((q) => ({
    label: quantileLabel(q),
    cls: 'num e2e',
    title: `e2e processing latency, ${quantileLabel(q)} (average over brokers; hover a value for min/max)`,
    cell: (row) => {
      const e2e = pick(row);
      const p = e2e && (e2e.percentiles || []).find((x) => x.quantile === q);
      if (!p) return '';
      const average = p.average !== undefined ? p.average : p.value;
      return h('span', {title: `min ${nanotohuman(p.min ?? average)}, max ${nanotohuman(p.max ?? average)}`},
        nanotohuman(average));
    },
  }));
}

/** Header groups for a table whose last columns are e2e percentiles. */
export function e2eGroups(columns, e2eCount, label = '') {
  if (!e2eCount) return null;
  return [{label, span: columns - e2eCount}, {label: 'E2E processing latency', span: e2eCount, cls: 'e2e'}];
}

/**
 * Rows for the brokers that failed this poll, to add to a per-broker table: each has
 * `node` and `error`, and `failed: true` so the columns can show the error. A failed
 * lookupd is no broker: it shows in the page's warning line only.
 */
export function failedRows(data, present = new Set(), lookupds = []) {
  return ((data && data.errors) || [])
    .filter((e) => !present.has(e.node) && !lookupds.includes(e.node))
    .map((e) => ({node: e.node, error: e.error, failed: true}));
}

/** The class of a per-broker row: failed brokers and paused ones stand out. */
export function rowClass(row) {
  return [row.failed ? 'failed' : '', row.paused ? 'paused' : ''].filter(Boolean).join(' ');
}

/** The first cell of a per-broker row: its link, a paused badge, or its error. */
export function hostCell(row, extra = null) {
  if (row.failed) {
    return h('span.host', null, nodeLink(row.node), ' ', badge('unreachable', 'error'),
      h('div.error-text', null, row.error));
  }
  return h('span.host', null, extra, nodeLink(row.node, row.hostname ? `${row.hostname} (${row.node})` : row.node),
    row.paused ? [' ', badge('paused', 'paused')] : null);
}

/** A number column of a per-broker table: commas, and a dash on a failed broker's row. */
export function num(fn) {
  return (row) => (row.failed ? '–' : commafy(fn(row)));
}

/** nsqadmin's "Memory + Disk" cell. */
export function memDisk(row) {
  return row.failed ? '–' : `${commafy(row.memory_depth)} + ${commafy(row.backend_depth)}`;
}

/** A section with a heading. */
export function section(title, ...children) {
  return h('section.block', null, h('h2', null, title), ...children);
}

/** A notice shown instead of an empty table. */
export function notice(text) {
  return h('div.notice', null, text);
}
