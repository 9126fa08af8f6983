// A topic: its actions, the last hour's charts, a row per broker and a row per channel
// (nsqadmin's topic page, plus the charts and the failed brokers' rows).
import {apiUrl, del, get, post, url} from '../api.js';
import {HistoryCharts} from '../chart.js';
import {graphiteBlock} from '../graphite.js';
import {badge, commafy, h} from '../dom.js';
import {Table} from '../table.js';
import {
  actionBar, actionButton, e2eColumns, e2eGroups, failedRows, hostCell, memDisk, notice, num,
  pageHeader, rowClass, section,
} from './common.js';
import {tombstoneButton} from './tombstone.js';

/** Mount the page of params.topic in main; returns {title, refresh}. */
export function mount(main, {topic}, ctx) {
  const header = pageHeader([['Topics', url('/')]], topic);
  const bar = actionBar();
  const charts = new HistoryCharts();
  const nodes = new Table([], {key: (r) => r.node, rowClass});
  nodes.el.id = 'topic-nodes';
  const channels = new Table([], {key: (c) => c.channel_name, rowClass: (c) => (c.paused ? 'paused' : '')});
  channels.el.id = 'topic-channels';
  const noProducers = notice('No broker has this topic. See Lookup for what the lookupds know.');
  const noChannels = notice(
    'No channels exist for this topic: messages queue at the topic until a channel is created.');
  const graphite = graphiteBlock(ctx.config, topic, '', ['depth', 'message_count']);
  main.append(header.el, bar.el, charts.el, graphite || '',
    section('Topic message queue', nodes.el, noProducers),
    section('Channel message queues', channels.el, noChannels));

  const api = apiUrl('/topics', topic);
  const after = () => ctx.refreshNow();
  let paused = null;

  function renderActions(isPaused) {
    if (!ctx.config.is_admin || isPaused === paused) return;
    paused = isPaused;
    const pauseVerb = isPaused ? 'Unpause' : 'Pause';
    bar.buttons.replaceChildren(
      actionButton('Empty Queue', 'warning', {action: 'empty', outcome: bar.outcome, after,
        confirm: {title: 'Empty topic', verb: 'Empty',
          text: `Empty topic "${topic}" on every broker? Its queued messages are deleted.`},
        request: () => post(api, {action: 'empty'})}),
      actionButton('Delete Topic', 'danger', {action: 'delete', outcome: bar.outcome,
        after: () => ctx.navigate(url('/')),
        confirm: {title: 'Delete topic', verb: 'Delete',
          text: `Delete topic "${topic}" and all its channels on every broker and lookupd?`},
        request: () => del(api)}),
      actionButton(`${pauseVerb} Topic`, isPaused ? 'success' : 'primary', {action: isPaused ? 'unpause' : 'pause',
        outcome: bar.outcome, after,
        confirm: isPaused ? null : {title: 'Pause topic', verb: 'Pause',
          text: `Pause topic "${topic}"? No channel receives its messages until it is unpaused.`},
        request: () => post(api, {action: isPaused ? 'unpause' : 'pause'})}));
  }

  function render(data) {
    const e2e = e2eColumns(data.e2e_processing_latency);
    const nodeCols = [
      {label: 'Broker', cell: (r) => (r.total ? 'Total' : hostCell(r, tombstoneButton(ctx, r, topic)))},
      {label: 'Depth', cls: 'num', cell: num((r) => r.depth)},
      {label: 'Memory + Disk', cls: 'num', cell: memDisk},
      {label: 'Messages', cls: 'num', cell: num((r) => r.message_count)},
      {label: 'Channels', cls: 'num', cell: num((r) => (r.channels || []).length)},
      ...e2e,
    ];
    nodes.setColumns(nodeCols, e2eGroups(nodeCols.length, e2e.length));
    const rows = (data.nodes || []);
    const failed = failedRows(data, new Set(rows.map((r) => r.node)), ctx.config.nsqlookupd || []);
    nodes.update([...rows, ...failed], rows.length ? [{...data, total: true, paused: false}] : []);
    nodes.el.hidden = rows.length + failed.length === 0;
    noProducers.hidden = !nodes.el.hidden;

    const chanCols = [
      {label: 'Channel', cell: (c) => h('span', null,
        h('a.channel', {href: url('/topics', topic, c.channel_name)}, c.channel_name),
        c.paused ? [' ', badge('paused', 'paused')] : null)},
      {label: 'Depth', cls: 'num', cell: (c) => commafy(c.depth)},
      {label: 'Memory + Disk', cls: 'num', cell: memDisk},
      {label: 'In-Flight', cls: 'num', cell: (c) => commafy(c.in_flight_count)},
      {label: 'Deferred', cls: 'num', cell: (c) => commafy(c.deferred_count)},
      {label: 'Requeued', cls: 'num', cell: (c) => commafy(c.requeue_count)},
      {label: 'Timed Out', cls: 'num', cell: (c) => commafy(c.timeout_count)},
      {label: 'Messages', cls: 'num', cell: (c) => commafy(c.message_count)},
      {label: 'Connections', cls: 'num', cell: (c) => commafy(c.client_count)},
      ...e2e,
    ];
    channels.setColumns(chanCols, e2eGroups(chanCols.length, e2e.length));
    const chans = [...(data.channels || [])].sort((a, b) => a.channel_name.localeCompare(b.channel_name));
    channels.update(chans);
    channels.el.hidden = chans.length === 0;
    noChannels.hidden = chans.length > 0 || rows.length === 0;

    header.badges.replaceChildren(...(data.paused ? [badge('paused', 'paused')] : []));
    renderActions(Boolean(data.paused));
    bar.el.hidden = rows.length === 0 && !ctx.config.is_admin;
  }

  return {
    title: topic,
    async refresh() {
      const [data, history] = await Promise.all([
        get(api), get(apiUrl('/history/topics', topic)).catch(() => null)]);
      render(data);
      if (history) charts.update(history);
      return data.message;
    },
  };
}
