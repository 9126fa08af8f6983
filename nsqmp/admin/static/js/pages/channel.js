// A channel: its actions, the last hour's charts, a row per broker and every client
// with all of its fields (nsqadmin's channel page, plus charts and failed brokers' rows).
import {apiUrl, del, get, post, url} from '../api.js';
import {HistoryCharts} from '../chart.js';
import {graphiteBlock} from '../graphite.js';
import {badge, commafy, duration, h} from '../dom.js';
import {Table} from '../table.js';
import {
  actionBar, actionButton, e2eColumns, e2eGroups, failedRows, hostCell, memDisk, nodeLink, notice, num,
  pageHeader, rowClass, section,
} from './common.js';
import {peekSection} from './peek.js';

/** The attribute badges of a client: sampling, TLS, deflate, snappy, auth. */
export function clientFlags(c) {
  const flags = [];
  if (c.sample_rate) flags.push(badge(`Sampled ${c.sample_rate}%`, 'info'));
  if (c.tls) {
    const title = c.tls_version ? [c.tls_version, c.tls_cipher_suite, c.tls_negotiated_protocol,
      `mutual:${c.tls_negotiated_protocol_is_mutual}`].join(' ') : null;
    flags.push(badge('TLS', 'warning', title));
  }
  if (c.deflate) flags.push(badge('Deflate', 'default'));
  if (c.snappy) flags.push(badge('Snappy', 'primary'));
  if (c.authed) flags.push(badge('Auth', 'success', c.auth_identity ? `Identity: ${c.auth_identity}` : 'Authed'));
  return h('span.flags', null, flags);
}

/** How long a client has been connected: from connect_ts (live), else the API's duration. */
export function connectedFor(c) {
  if (c.connect_ts) return duration(Date.now() / 1000 - c.connect_ts);
  return duration((c.connected || 0) / 1e9);
}

/** The client columns (shared with the node page). */
export function clientColumns({showNode = true} = {}) {
  return [
    {label: 'Address', cell: (c) => h('span.mono', null, c.remote_address)},
    {label: 'Client ID', cell: (c) => c.client_id},
    {label: 'Hostname', cell: (c) => c.hostname},
    {label: 'User-Agent', cls: 'ua', cell: (c) => h('span.user-agent', null, c.user_agent || '')},
    {label: 'Version', cell: (c) => c.version},
    {label: 'Attributes', cell: clientFlags},
    showNode ? {label: 'Broker', cell: (c) => nodeLink(c.node)} : null,
    {label: 'RDY', cls: 'num', title: 'ready count', cell: (c) => commafy(c.ready_count)},
    {label: 'In-Flight', cls: 'num', cell: (c) => commafy(c.in_flight_count)},
    {label: 'Finished', cls: 'num', cell: (c) => commafy(c.finish_count)},
    {label: 'Requeued', cls: 'num', cell: (c) => commafy(c.requeue_count)},
    {label: 'Messages', cls: 'num', cell: (c) => commafy(c.message_count)},
    {label: 'Connected', cls: 'num', cell: connectedFor},
  ].filter(Boolean);
}

/** A client's key across polls. */
export const clientKey = (c) => `${c.node}|${c.remote_address}|${c.client_id}`;

/** Mount the page of params.topic / params.channel in main; returns {title, refresh}. */
export function mount(main, {topic, channel}, ctx) {
  const header = pageHeader([['Topics', url('/')], [topic, url('/topics', topic)]], channel, `topic ${topic}`);
  const bar = actionBar();
  const charts = new HistoryCharts();
  const nodes = new Table([], {key: (r) => r.node, rowClass});
  nodes.el.id = 'channel-nodes';
  const clients = new Table(clientColumns(), {key: clientKey});
  clients.el.id = 'channel-clients';
  const noProducers = notice('No broker has this topic/channel. See Lookup for what the lookupds know.');
  const noClients = notice('No clients connected to this channel.');
  const graphite = graphiteBlock(ctx.config, topic, channel, ['depth', 'in_flight_count', 'message_count']);
  main.append(header.el, bar.el, charts.el, graphite || '',
    section('Channel message queues', nodes.el, noProducers),
    section('Client connections', clients.el, noClients));
  const peek = peekSection(topic, channel);  // nsqmp: the next messages, nothing consumed
  main.append(peek.el);

  const api = apiUrl('/topics', topic, channel);
  const after = () => ctx.refreshNow();
  let paused = null;

  function renderActions(isPaused) {
    if (!ctx.config.is_admin || isPaused === paused) return;
    paused = isPaused;
    const name = `"${topic}/${channel}"`;
    bar.buttons.replaceChildren(
      actionButton('Empty Queue', 'warning', {action: 'empty', outcome: bar.outcome, after,
        confirm: {title: 'Empty channel', verb: 'Empty',
          text: `Empty channel ${name} on every broker? Its queued messages are deleted.`},
        request: () => post(api, {action: 'empty'})}),
      actionButton('Delete Channel', 'danger', {action: 'delete', outcome: bar.outcome,
        after: () => ctx.navigate(url('/topics', topic)),
        confirm: {title: 'Delete channel', verb: 'Delete',
          text: `Delete channel ${name} on every broker and lookupd? Its consumers are disconnected.`},
        request: () => del(api)}),
      actionButton(isPaused ? 'Unpause Channel' : 'Pause Channel', isPaused ? 'success' : 'primary', {
        action: isPaused ? 'unpause' : 'pause', outcome: bar.outcome, after,
        confirm: isPaused ? null : {title: 'Pause channel', verb: 'Pause',
          text: `Pause channel ${name}? Its consumers get no messages until it is unpaused.`},
        request: () => post(api, {action: isPaused ? 'unpause' : 'pause'})}));
  }

  function render(data) {
    const e2e = e2eColumns(data.e2e_processing_latency);
    const cols = [
      {label: 'Broker', cell: (r) => (r.total ? 'Total' : hostCell(r))},
      {label: 'Depth', cls: 'num', cell: num((r) => r.depth)},
      {label: 'Memory + Disk', cls: 'num', cell: memDisk},
      {label: 'In-Flight', cls: 'num', cell: num((r) => r.in_flight_count)},
      {label: 'Deferred', cls: 'num', cell: num((r) => r.deferred_count)},
      {label: 'Requeued', cls: 'num', cell: num((r) => r.requeue_count)},
      {label: 'Timed Out', cls: 'num', cell: num((r) => r.timeout_count)},
      {label: 'Messages', cls: 'num', cell: num((r) => r.message_count)},
      {label: 'Connections', cls: 'num', cell: num((r) => r.client_count)},
      ...e2e,
    ];
    nodes.setColumns(cols, e2eGroups(cols.length, e2e.length));
    const rows = data.nodes || [];
    const failed = failedRows(data, new Set(rows.map((r) => r.node)), ctx.config.nsqlookupd || []);
    nodes.update([...rows, ...failed], rows.length ? [{...data, total: true, paused: false}] : []);
    nodes.el.hidden = rows.length + failed.length === 0;
    noProducers.hidden = !nodes.el.hidden;

    const list = [...(data.clients || [])];
    clients.update(list);
    clients.el.hidden = list.length === 0;
    noClients.hidden = list.length > 0;

    header.badges.replaceChildren(...(data.paused ? [badge('paused', 'paused')] : []));
    renderActions(Boolean(data.paused));
  }

  return {
    title: `${topic}/${channel}`,
    async refresh() {
      const [data, history] = await Promise.all([
        get(api), get(apiUrl('/history/topics', topic, channel)).catch(() => null), peek.refresh()]);
      render(data);
      if (history) charts.update(history);
      return data.message;
    },
  };
}
