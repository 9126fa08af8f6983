// The admin's front end: a small router over the page routes, the navigation bar, the
// status line and the poll loop that refreshes the current page's numbers in place.
// Plain ES modules, no framework, no build step.
import {ApiError, apiUrl, basePath, get, url} from './api.js';
import {alertBox, h, replace} from './dom.js';
import * as channel from './pages/channel.js';
import * as counter from './pages/counter.js';
import * as lookup from './pages/lookup.js';
import * as node from './pages/node.js';
import * as nodes from './pages/nodes.js';
import * as topic from './pages/topic.js';
import * as topics from './pages/topics.js';

// Route patterns below the base path; a ':name' segment is a URL-escaped parameter.
const ROUTES = [
  ['/', topics, 'topics'],
  ['/topics', topics, 'topics'],
  ['/topics/:topic', topic, 'topics'],
  ['/topics/:topic/:channel', channel, 'topics'],
  ['/nodes', nodes, 'nodes'],
  ['/nodes/:node', node, 'nodes'],
  ['/counter', counter, 'counter'],
  ['/lookup', lookup, 'lookup'],
];

const state = {config: null, page: null, timer: null, generation: 0, polling: 0, again: false, lastOk: 0};

/** The route for a path below the base path: [module, params, nav] or null. */
export function match(path) {
  const parts = path.replace(/\/+$/, '').split('/').filter(Boolean);
  for (const [pattern, module, nav] of ROUTES) {
    const want = pattern.split('/').filter(Boolean);
    if (want.length !== parts.length) continue;
    const params = {};
    if (want.every((seg, i) => (seg.startsWith(':')
      ? (params[seg.slice(1)] = decodeURIComponent(parts[i]), true)
      : seg === parts[i]))) {
      return [module, params, nav];
    }
  }
  return null;
}

function navBar() {
  const link = (path, label, nav) => h('a.nav-link', {href: url(path), dataset: {nav}}, label);
  return h('nav.topbar', null,
    h('a.brand', {href: url('/')}, h('span.brand-mark'), 'nsqmp admin'),
    h('div.nav-links', null,
      link('/', 'Topics', 'topics'),
      link('/nodes', 'Nodes', 'nodes'),
      link('/counter', 'Counter', 'counter'),
      link('/lookup', 'Lookup', 'lookup')),
    h('div.nav-right', null,
      h('span#live.live', {title: 'pages refresh their numbers by polling the admin API'}, ''),
      h('span#version.version', null, '')));
}

/** Show the page for the current location, replacing the previous one. */
async function render() {
  const generation = ++state.generation;
  clearTimeout(state.timer);
  if (state.page && state.page.destroy) state.page.destroy();
  state.page = null;
  let path = window.location.pathname;
  if (basePath && path.startsWith(basePath)) path = path.slice(basePath.length) || '/';
  const main = document.getElementById('main');
  document.getElementById('flash').replaceChildren();
  const found = match(path);
  for (const a of document.querySelectorAll('.nav-link')) {
    a.classList.toggle('active', Boolean(found) && a.dataset.nav === found[2]);
  }
  if (!found) {
    replace(main, alertBox('warning', 'Not found', `No page at ${path}`));
    return;
  }
  const [module, params] = found;
  main.replaceChildren();
  const page = module.mount(main, params, {config: state.config, navigate, refreshNow, flash});
  state.page = page;
  document.title = page.title ? `${page.title} · nsqmp admin` : 'nsqmp admin';
  await poll(generation);
}

/**
 * Refresh the current page, then schedule the next refresh. One poll at a time per page:
 * asked again while one is under way (an action's refreshNow), it polls once more after.
 */
async function poll(generation) {
  const page = state.page;
  if (!page || generation !== state.generation) return;
  if (state.polling === generation) {
    state.again = true;
    return;
  }
  state.polling = generation;
  state.again = false;
  try {
    await pollOnce(page, generation);
  } finally {
    if (state.polling === generation) state.polling = 0;
  }
  if (generation !== state.generation) return;
  clearTimeout(state.timer);
  if (state.again) {
    state.timer = setTimeout(() => poll(generation), 0);
    return;
  }
  if (page.poll === false) return;
  const every = (state.config && state.config.refresh_interval) || 5;
  state.timer = setTimeout(() => poll(generation), (page.pollSeconds || every) * 1000);
}

/** One refresh of page: its data, the warning or error line, the live indicator. */
async function pollOnce(page, generation) {
  const banner = document.getElementById('banner');
  const started = performance.now();
  try {
    const warning = await page.refresh();
    // what one poll costs (fetch + render), for the bench and the curious: body[data-refresh-ms]
    document.body.dataset.refreshMs = (performance.now() - started).toFixed(1);
    if (generation !== state.generation) return;
    state.lastOk = Date.now();
    banner.replaceChildren();
    if (warning) banner.append(alertBox('warning', 'Partial data:', warning));
    setLive(true);
  } catch (err) {
    if (generation !== state.generation) return;
    const text = err instanceof ApiError ? err.message : String(err);
    replace(banner, alertBox('error', 'Error:', text));
    setLive(false);
    if (!(err instanceof ApiError)) console.error(err);
  }
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

/** The top bar's indicator: green with the last good poll's time, or "stale". */
function setLive(ok) {
  const live = document.getElementById('live');
  live.className = ok ? 'live ok' : 'live stale';
  live.textContent = ok ? `live · ${new Date(state.lastOk).toLocaleTimeString()}` : 'stale';
}

/** Navigate without a reload (pages call it after an action; links go through it). */
function navigate(href) {
  window.history.pushState(null, '', href);
  render();
}

/** Show the outcome of an action above the page until the next navigation. */
function flash(kind, title, text) {
  replace(document.getElementById('flash'), alertBox(kind, title, text));
}

/** Re-poll the current page at once (after an action). */
function refreshNow() {
  clearTimeout(state.timer);
  poll(state.generation);
}

/** Links inside the app navigate without a reload (a modified or middle click does not). */
function onClick(event) {
  const a = event.target.closest('a');
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey ||
      event.shiftKey || event.altKey || a.target || a.origin !== window.location.origin) return;
  const path = a.pathname;
  if (basePath && !path.startsWith(basePath)) return;
  if (path.startsWith(url('/static')) || path.startsWith(url('/api'))) return;
  event.preventDefault();
  if (a.href !== window.location.href) navigate(a.href);
}

/** Boot: the top bar, the admin's config (is_admin, lookupds, poll interval), the first page. */
async function start() {
  document.body.prepend(navBar());
  try {
    state.config = await get(apiUrl('/config'));
  } catch (err) {
    state.config = {is_admin: true, refresh_interval: 5, nsqlookupd: [], nsqd: []};
  }
  const v = state.config.nsqmp_version ? `nsqmp ${state.config.nsqmp_version}` : '';
  document.getElementById('version').textContent = v;
  document.addEventListener('click', onClick);
  window.addEventListener('popstate', render);
  render();
}

start();
