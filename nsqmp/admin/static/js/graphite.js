// nsqadmin's Graphite graphs, for an admin started with --graphite-url: the same render
// URLs and targets nsqadmin's front end builds from the statsd prefix and key formats
// (nsqadmin/static/js/lib/handlebars_helpers.js), so the same Graphite serves both.
import {basePath} from './api.js';
import {h} from './dom.js';

const METRIC_TYPE = {
  depth: 'gauge', in_flight_count: 'gauge', deferred_count: 'gauge', requeue_count: 'counter',
  timeout_count: 'counter', message_count: 'counter', clients: 'gauge',
};

function formatKey(config, key, metric) {
  const type = METRIC_TYPE[metric];
  if (type === 'counter') return config.statsd_counter_format.replace(/%s/g, key);
  if (type === 'gauge') return config.statsd_gauge_format.replace(/%s/g, key);
  return key;
}

function prefix(config, host) {
  let p = config.statsd_prefix.replace(/%s/g, host.replace(/[.:]/g, '_'));
  if (!p.endsWith('.')) p += '.';
  return p;
}

// bitly/statsdaemon's key sanitising, as nsqadmin does it
const sanitize = (s) => s.replaceAll(' ', '_').replaceAll('/', '-').replace(/[^a-zA-Z0-9-_.]/g, '');

/** The Graphite target of a topic's (channel empty) or channel's metric on node ("*": all). */
export function target(config, node, topic, channel, metric) {
  let key = `${prefix(config, node || '*')}topic.${sanitize(topic)}`;
  if (channel) key += `.channel.${sanitize(channel)}`;
  return `sumSeries(${formatKey(config, `${key}.${metric}`, metric)})`;
}

/** The graph timeframe: ?t= (nsqadmin's), else 2h. */
export function interval() {
  return new URLSearchParams(window.location.search).get('t') || '2h';
}

/** nsqadmin's large_graph render URL. */
export function graphUrl(config, node, topic, channel, metric) {
  const every = `${config.statsd_interval}sec`;
  let t = target(config, node, topic, channel, metric);
  if (METRIC_TYPE[metric] === 'counter') t = `scale(${t},${1 / config.statsd_interval})`;
  const q = new URLSearchParams({
    colorList: metric === 'depth' || metric === 'deferred_count' ? 'red' : 'blue',
    height: '450', width: '800', bgcolor: 'ff000000', fgcolor: '999999', yMin: '0',
    lineMode: 'connected', drawNullAsZero: 'false', from: `-${interval()}`, until: '-1min',
  });
  q.append('target', `summarize(${t},"${every}","avg")`);
  const base = config.proxy_graphite ? basePath : config.graphite_url.replace(/\/+$/, '');
  return `${base}/render?${q}`;
}

/**
 * A block of Graphite graphs (null without --graphite-url): one image per metric of the
 * topic (channel empty) or channel, over every node.
 */
export function graphiteBlock(config, topic, channel, metrics) {
  if (!config.graph_enabled) return null;
  return h('section.block.graphite', null, h('h2', null, `Graphite (${interval()})`),
    h('div.graphite-graphs', null, metrics.map((m) => h('figure.graphite-graph', null,
      h('a', {href: graphUrl(config, '*', topic, channel, m), target: '_blank', rel: 'noopener'},
        h('img', {src: graphUrl(config, '*', topic, channel, m), alt: `${m} (Graphite)`, width: 400, height: 225})),
      h('figcaption', null, m)))));
}
