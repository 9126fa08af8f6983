// The topic list: every topic with its depth, messages, rates, channel and broker
// counts (nsqmp's /api/stats/topics: one request for the whole list), filterable.
import {apiUrl, get, url} from '../api.js';
import {badge, commafy, h, rate} from '../dom.js';
import {Table} from '../table.js';
import {notice, pageHeader, section} from './common.js';

/** Mount the topics page in main; returns {title, refresh}. */
export function mount(main) {
  const header = pageHeader([], 'Topics');
  const filter = h('input.filter', {type: 'search', placeholder: 'Filter topics', 'aria-label': 'Filter topics'});
  const count = h('span.count');
  const table = new Table([
    {label: 'Topic', cell: (t) => h('span', null, h('a.topic', {href: url('/topics', t.topic_name)}, t.topic_name),
      t.paused ? [' ', badge('paused', 'paused')] : null)},
    {label: 'Depth', cls: 'num', cell: (t) => commafy(t.depth)},
    {label: 'Memory + Disk', cls: 'num', cell: (t) => `${commafy(t.memory_depth)} + ${commafy(t.backend_depth)}`},
    {label: 'Messages', cls: 'num', cell: (t) => commafy(t.message_count)},
    {label: 'Publish /s', cls: 'num', title: 'messages published per second (admin samples)',
      cell: (t) => rate(t.publish_rate)},
    {label: 'Delivery /s', cls: 'num', title: 'messages finished per second, all channels',
      cell: (t) => rate(t.delivery_rate)},
    {label: 'Channels', cls: 'num', cell: (t) => commafy(t.channel_count)},
    {label: 'Brokers', cls: 'num', cell: (t) => commafy(t.node_count)},
  ], {key: (t) => t.topic_name, rowClass: (t) => (t.paused ? 'paused' : '')});
  table.el.id = 'topics-table';
  const empty = notice('No topics found.');
  const body = section('', h('div.toolbar', null, filter, count), table.el, empty);
  main.append(header.el, body);
  let last = null;

  function show() {
    if (!last) return;
    const needle = filter.value.trim().toLowerCase();
    const rows = needle ? last.topics.filter((t) => t.topic_name.toLowerCase().includes(needle)) : last.topics;
    table.update(rows);
    count.textContent = needle ? `${rows.length} of ${last.topics.length} topics` : `${last.topics.length} topics`;
    empty.hidden = last.topics.length > 0;
    table.el.hidden = last.topics.length === 0;
  }
  filter.addEventListener('input', show);

  return {
    title: 'Topics',
    async refresh() {
      last = await get(apiUrl('/stats/topics'));
      last.topics = last.topics || [];
      show();
      return last.message;
    },
  };
}
