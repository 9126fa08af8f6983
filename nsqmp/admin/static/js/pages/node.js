// One broker (nsqadmin's node page): every topic and channel on it, and every client,
// with totals; tombstone buttons next to its topics.
import {apiUrl, get, url} from '../api.js';
import {badge, commafy, h} from '../dom.js';
import {Table} from '../table.js';
import {clientColumns, clientKey} from './channel.js';
import {memDisk, notice, pageHeader, section} from './common.js';
import {nodeName} from './nodes.js';
import {tombstoneButton} from './tombstone.js';

/** Mount the page of broker params.node in main; returns {title, refresh}. */
export function mount(main, {node}, ctx) {
  const header = pageHeader([['Nodes', url('/nodes')]], node);
  const summary = h('div.summary');
  const paused = (x) => (x.paused ? [' ', badge('paused', 'paused')] : null);
  const topics = new Table([
    {label: 'Topic', cell: (t) => h('span', null, tombstoneButton(ctx, {node}, t.topic_name),
      h('a.topic', {href: url('/topics', t.topic_name)}, t.topic_name), paused(t))},
    {label: 'Depth', cls: 'num', cell: (t) => commafy(t.depth)},
    {label: 'Memory + Disk', cls: 'num', cell: memDisk},
    {label: 'Messages', cls: 'num', cell: (t) => commafy(t.message_count)},
    {label: 'Channels', cls: 'num', cell: (t) => commafy((t.channels || []).length)},
  ], {key: (t) => t.topic_name, rowClass: (t) => (t.paused ? 'paused' : '')});
  topics.el.id = 'node-topics';
  const channels = new Table([
    {label: 'Topic', cell: (c) => c.topic_name},
    {label: 'Channel', cell: (c) => h('span', null,
      h('a.channel', {href: url('/topics', c.topic_name, c.channel_name)}, c.channel_name), paused(c))},
    {label: 'Depth', cls: 'num', cell: (c) => commafy(c.depth)},
    {label: 'Memory + Disk', cls: 'num', cell: memDisk},
    {label: 'In-Flight', cls: 'num', cell: (c) => commafy(c.in_flight_count)},
    {label: 'Deferred', cls: 'num', cell: (c) => commafy(c.deferred_count)},
    {label: 'Requeued', cls: 'num', cell: (c) => commafy(c.requeue_count)},
    {label: 'Timed Out', cls: 'num', cell: (c) => commafy(c.timeout_count)},
    {label: 'Messages', cls: 'num', cell: (c) => commafy(c.message_count)},
    {label: 'Connections', cls: 'num', cell: (c) => commafy((c.clients || []).length)},
  ], {key: (c) => `${c.topic_name}/${c.channel_name}`, rowClass: (c) => (c.paused ? 'paused' : '')});
  channels.el.id = 'node-channels';
  const clients = new Table([
    {label: 'Topic / Channel', cell: (c) => `${c.topic_name}/${c.channel_name}`},
    ...clientColumns({showNode: false}),
  ], {key: (c) => `${c.topic_name}/${c.channel_name}|${clientKey(c)}`});
  clients.el.id = 'node-clients';
  const noTopics = notice('No topics exist on this node.');
  const noClients = notice('No clients connected to this node.');
  main.append(header.el, summary, section('Topics', topics.el, noTopics),
    section('Channels', channels.el), section('Clients', clients.el, noClients));

  return {
    title: node,
    async refresh() {
      const [data, all] = await Promise.all([get(apiUrl('/nodes', node)), get(apiUrl('/nodes')).catch(() => null)]);
      const producer = ((all && all.nodes) || []).find((p) => nodeName(p) === node);
      const list = [...(data.topics || [])].sort((a, b) => a.topic_name.localeCompare(b.topic_name));
      topics.update(list);
      const chans = list.flatMap((t) => (t.channels || []).map((c) => ({...c, topic_name: t.topic_name})));
      channels.update(chans);
      const cls = chans.flatMap((c) => (c.clients || []).map(
        (cl) => ({...cl, topic_name: c.topic_name, channel_name: c.channel_name})));
      clients.update(cls);
      topics.el.hidden = list.length === 0;
      noTopics.hidden = list.length > 0;
      channels.el.closest('section').hidden = chans.length === 0;
      clients.el.hidden = cls.length === 0;
      noClients.hidden = cls.length > 0;
      summary.replaceChildren(
        producer ? h('span.stat', {id: 'node-info'}, h('strong', null, producer.hostname), ' ',
          `version ${producer.version} · TCP ${producer.tcp_port} · HTTP ${producer.http_port}`) : null,
        h('span.stat', null, h('strong', {id: 'node-topic-count'}, commafy(list.length)), ' topics'),
        h('span.stat', null, h('strong', {id: 'node-total-messages'}, commafy(data.total_messages)), ' messages'),
        h('span.stat', null, h('strong', {id: 'node-total-clients'}, commafy(data.total_clients)), ' clients'));
      return data.message;
    },
  };
}
