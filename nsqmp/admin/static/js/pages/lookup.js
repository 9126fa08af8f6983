// What each lookupd knows (nsqmp's /api/lookup), the inactive topics and channels with
// their delete buttons, and the form that creates a topic/channel hierarchy before any
// producer exists (nsqadmin's lookup page).
import {apiUrl, del, get, post, url} from '../api.js';
import {confirmAction} from '../confirm.js';
import {badge, h, replace} from '../dom.js';
import {Table} from '../table.js';
import {actionBar, nodeLink, notice, pageHeader, runAction, section} from './common.js';

/** Mount the lookup page in main; returns {title, refresh}. */
export function mount(main, params, ctx) {
  const header = pageHeader([], 'Lookup');
  const lookupds = ctx.config.nsqlookupd || [];
  if (!lookupds.length) {
    main.append(header.el, notice('The admin is not configured with nsqlookupd hosts (--lookupd-http-address).'));
    return {title: 'Lookup', poll: false, async refresh() { return ''; }};
  }
  const hosts = new Table([
    {label: 'nsqlookupd', cell: (l) => h('span.mono', null, l.address)},
    {label: 'Status', cell: (l) => (l.error
      ? h('span', null, badge('unreachable', 'error'), h('div.error-text', null, l.error))
      : badge('ok', 'success'))},
    {label: 'Topics', cls: 'num', cell: (l) => (l.error ? '–' : String((l.topics || []).length))},
  ], {key: (l) => l.address, rowClass: (l) => (l.error ? 'failed' : '')});
  hosts.el.id = 'lookup-hosts';
  const known = new Table([
    {label: 'nsqlookupd', cell: (r) => h('span.mono', null, r.lookupd)},
    {label: 'Topic', cell: (r) => h('a.topic', {href: url('/topics', r.topic)}, r.topic)},
    {label: 'Channels', cell: (r) => h('span', null,
      (r.channels || []).map((c) => h('a.tag', {href: url('/topics', r.topic, c)}, c)))},
    {label: 'Producers', cell: (r) => h('span', null, (r.producers || []).map((p) => [nodeLink(p), ' ']))},
    {label: 'Tombstoned', cell: (r) => h('span', null,
      (r.tombstoned || []).map((p) => h('span.tag.tombstoned', null, p)))},
  ], {key: (r) => `${r.lookupd}|${r.topic}`});
  known.el.id = 'lookup-topics';
  const inactive = h('ul.tree', {id: 'inactive-topics'});
  const noInactive = notice('No inactive topics: every topic the lookupds know has a producer.');
  main.append(header.el, section('Lookupds', hosts.el),
    section('Inactive topics and channels', h('p.hint', null,
      'Known to the lookupds but produced on no broker.'), inactive, noInactive),
    section('Topics the lookupds know', known.el));
  if (ctx.config.is_admin) main.append(createForm(ctx));

  function deleteButton(what, path, text) {
    const label = `Delete ${what}`;
    const button = h('button.icon-btn.delete', {type: 'button', title: label, 'aria-label': label}, '✕');
    button.addEventListener('click', async () => {
      if (!(await confirmAction(`Delete ${what}`, text, 'Delete'))) return;
      await runAction(button, () => del(path), null, () => ctx.refreshNow());
    });
    return button;
  }

  let shown = null;
  function renderInactive(topics) {
    const names = Object.keys(topics).sort();
    const signature = JSON.stringify(names.map((t) => [t, topics[t]]));
    if (signature === shown) return;  // unchanged: keep the elements (and a pointer on them)
    shown = signature;
    inactive.replaceChildren(...names.map((t) => h('li', {dataset: {topic: t}},
      deleteButton('topic', apiUrl('/topics', t), `Delete topic "${t}" on every lookupd and broker?`),
      h('a.topic', {href: url('/topics', t)}, t),
      h('ul', null, (topics[t] || []).map((c) => h('li', {dataset: {channel: c}},
        deleteButton('channel', apiUrl('/topics', t, c), `Delete channel "${t}/${c}" on every lookupd and broker?`),
        h('a.channel', {href: url('/topics', t, c)}, c)))))));
    inactive.hidden = names.length === 0;
    noInactive.hidden = names.length > 0;
  }

  return {
    title: 'Lookup',
    async refresh() {
      const [data, orphans] = await Promise.all([get(apiUrl('/lookup')), get(apiUrl('/topics') + '?inactive=true')]);
      const list = data.lookupds || [];
      hosts.update(list);
      known.update(list.flatMap((l) => (l.topics || []).map((t) => ({...t, lookupd: l.address}))));
      renderInactive((orphans && orphans.topics) || {});
      return data.message || orphans.message;
    },
  };
}

/** The create topic/channel form. */
function createForm(ctx) {
  const topic = h('input', {type: 'text', name: 'topic', placeholder: 'Topic name', required: true,
    id: 'create-topic'});
  const channel = h('input', {type: 'text', name: 'channel', placeholder: 'Channel name (optional)',
    id: 'create-channel'});
  const bar = actionBar();
  const submit = h('button.btn.btn-primary', {type: 'submit', id: 'create-submit'}, 'Create');
  const form = h('form.create', {id: 'create-form'},
    h('p.hint', null, 'Set up a topic (and a channel) before its producers and consumers are deployed. ',
      'With no channel name, only the topic is created.'),
    h('div.form-row', null, topic, channel, submit), bar.outcome);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = {topic: topic.value.trim(), channel: channel.value.trim()};
    if (!body.topic) return;
    await runAction(submit, () => post(apiUrl('/topics'), body), bar.outcome, () => {
      replace(bar.outcome, h('div.alert.alert-success', null, 'Created ',
        h('a', {href: body.channel ? url('/topics', body.topic, body.channel) : url('/topics', body.topic)},
          body.channel ? `${body.topic}/${body.channel}` : body.topic)));
      ctx.refreshNow();
    });
  });
  return section('Create topic / channel', form);
}
