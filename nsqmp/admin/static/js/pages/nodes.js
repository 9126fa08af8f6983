// The brokers (nsqadmin's nodes page): host, addresses, ports, version, lookupd
// connections and the topics each one has; a broker that failed shows on its own row.
import {apiUrl, get, url} from '../api.js';
import {badge, h} from '../dom.js';
import {Table} from '../table.js';
import {failedRows, notice, pageHeader, section} from './common.js';

/** A producer's node name as nsqadmin links it: broadcast_address:http_port. */
export const nodeName = (p) => `${p.broadcast_address}:${p.http_port}`;

/** Mount the nodes page in main; returns {title, refresh}. */
export function mount(main, params, ctx) {
  const header = pageHeader([], 'Nodes');
  const lookupds = ctx.config.nsqlookupd || [];
  const table = new Table([
    {label: 'Hostname', cell: (p) => (p.failed ? h('span.host', null, p.node, ' ', badge('unreachable', 'error'),
      h('div.error-text', null, p.error)) : p.hostname)},
    {label: 'Broadcast Address', cell: (p) => (p.failed ? ''
      : h('a.node', {href: url('/nodes', nodeName(p)), title: 'this broker\'s page'}, nodeName(p)))},
    {label: 'TCP Port', cls: 'num', cell: (p) => (p.failed ? '' : p.tcp_port)},
    {label: 'HTTP Port', cls: 'num', cell: (p) => (p.failed ? '' : p.http_port)},
    {label: 'Version', cell: (p) => (p.failed ? '' : p.version)},
    lookupds.length ? {label: 'Lookupd Conns.', cls: 'num', cell: (p) => (p.failed ? '' : h(
      `span.conns${(p.remote_addresses || []).length !== lookupds.length ? '.short' : ''}`,
      {title: (p.remote_addresses || []).join('\n')}, String((p.remote_addresses || []).length)))} : null,
    {label: 'Topics', cls: 'topics-cell', cell: (p) => (p.failed ? '' : h('span', null,
      h('span.count-badge', null, String((p.topics || []).length)),
      (p.topics || []).map((t) => h(`a.tag${t.tombstoned ? '.tombstoned' : ''}`, {
        href: url('/topics', t.topic), title: t.tombstoned ? 'this topic is tombstoned on this node' : null,
      }, t.topic))))},
  ].filter(Boolean), {key: (p) => (p.failed ? `failed ${p.node}` : nodeName(p)),
    rowClass: (p) => (p.failed ? 'failed' : p.out_of_date ? 'warning' : '')});
  table.el.id = 'nodes-table';
  const empty = notice('No brokers found.');
  main.append(header.el, section('', table.el, empty));

  return {
    title: 'Nodes',
    async refresh() {
      const data = await get(apiUrl('/nodes'));
      const list = data.nodes || [];
      const failed = failedRows(data, new Set(list.map(nodeName)), ctx.config.nsqlookupd || []);
      table.update([...list, ...failed]);
      header.el.querySelector('.title-text').textContent = `Nodes (${list.length})`;
      empty.hidden = list.length + failed.length > 0;
      return data.message;
    },
  };
}
