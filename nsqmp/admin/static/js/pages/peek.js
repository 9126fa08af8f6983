// The channel page's "Peek" section (nsqmp): the next messages the channel would deliver
// on each broker (GET /api/topics/:topic/:channel/peek), nothing consumed. Bodies arrive
// as base64; they are decoded and inserted as text (h() makes text nodes), never as HTML.
import {apiUrl, get} from '../api.js';
import {badge, commafy, duration, h} from '../dom.js';
import {Table} from '../table.js';
import {nodeLink, notice, section} from './common.js';

const STATE_KIND = {queued: 'default', deferred: 'info', in_flight: 'warning'};
const SIZES = [10, 50, 100];

/** A body's preview: its bytes as UTF-8 (bad bytes as U+FFFD), control characters shown as
 *  U+FFFD too, and an ellipsis when the broker cut it. */
export function preview(m) {
  const bytes = Uint8Array.from(atob(m.body || ''), (c) => c.charCodeAt(0));
  // eslint-disable-next-line no-control-regex
  const text = new TextDecoder('utf-8').decode(bytes).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, '\ufffd');
  return m.truncated ? `${text}…` : text;
}

/** When a deferred message is due or an in-flight one times out, from now. */
function when(m) {
  const ns = m.state === 'deferred' ? m.due_ns : m.state === 'in_flight' ? m.deadline_ns : null;
  if (!ns) return '';
  const label = m.state === 'deferred' ? 'due in ' : 'times out in ';
  return label + duration(ns / 1e9 - Date.now() / 1000);
}

const COLUMNS = [
  {label: 'Broker', cell: (m) => nodeLink(m.node)},
  {label: 'State', cell: (m) => h('span', null, badge(m.state.replace('_', ' '), STATE_KIND[m.state]),
    m.client ? [' ', h('span.peek-client', null, m.client.client_id || m.client.remote_address)] : null)},
  {label: 'ID', cell: (m) => h('span.mono', null, m.id)},
  {label: 'Attempts', cls: 'num', title: 'deliveries so far', cell: (m) => commafy(m.attempts)},
  {label: 'Age', cls: 'num', title: 'since it was published',
    cell: (m) => duration(Date.now() / 1000 - m.timestamp / 1e9)},
  {label: 'When', cell: when},
  {label: 'Size', cls: 'num', title: 'body bytes', cell: (m) => commafy(m.body_size)},
  {label: 'Body', cls: 'peek-body',
    cell: (m) => h('span.mono', {title: m.truncated ? `first bytes of ${m.body_size}` : null}, preview(m))},
];

/** The section, and refresh() for the page's poll. */
export function peekSection(topic, channel) {
  let n = SIZES[0];
  const table = new Table(COLUMNS, {key: (m) => `${m.node}|${m.id}|${m.state}`});
  table.el.id = 'channel-peek';
  const empty = notice('Nothing waiting in this channel.');
  const choose = h('select#peek-n', {title: 'messages per broker',
    onchange: (ev) => { n = Number(ev.target.value); refresh(); }},
  SIZES.map((size) => h('option', {value: size}, `next ${size}`)));
  const el = section('Peek', h('p.peek-note', null,
    'The next messages this channel would deliver on each broker: queued, then deferred, then in flight. ',
    'Nothing is consumed. ', choose), table.el, empty);
  el.id = 'peek';

  async function refresh() {
    let data;
    try {
      data = await get(apiUrl('/topics', topic, channel, 'peek') + `?n=${n}`);
    } catch {
      el.hidden = true;  // no broker could answer (nsqd has no peek): the rest of the page still shows
      return;
    }
    el.hidden = false;
    const rows = data.messages || [];
    table.update(rows);
    table.el.hidden = rows.length === 0;
    empty.hidden = rows.length > 0;
  }
  return {el, refresh};
}
