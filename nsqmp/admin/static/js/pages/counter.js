// The counter (nsqadmin's counter page): messages processed across the cluster, counted
// up live between polls, with the rate of the last interval.
import {apiUrl, get} from '../api.js';
import {commafy, h, rate} from '../dom.js';

/** Mount the counter page in main; returns {title, refresh, destroy}. */
export function mount(main) {
  const number = h('div.counter-number', {id: 'counter-value'}, '–');
  const label = h('p.counter-label', null, 'Messages processed');
  const speed = h('p.counter-rate', {id: 'counter-rate'}, '');
  main.append(h('div.counter', null, number, label, speed));
  let shown = null;
  let target = null;
  let last = null;
  let frame = null;

  function tick() {
    frame = null;
    if (shown === null || target === null) return;
    shown = Math.min(target, shown + Math.max(1, (target - shown) / 20));
    number.textContent = commafy(shown);
    if (shown < target) frame = requestAnimationFrame(tick);
  }

  return {
    title: 'Counter',
    pollSeconds: 2,
    async refresh() {
      const data = await get(apiUrl('/counter'));
      const total = Object.values(data.stats || {}).reduce((n, s) => n + (s.message_count || 0), 0);
      const now = Date.now() / 1000;
      if (last && total >= last.total && now > last.time) {
        speed.textContent = `${rate((total - last.total) / (now - last.time))} msgs/s`;
      }
      last = {total, time: now};
      number.dataset.total = String(total);
      if (shown === null || total < shown) {
        shown = total;
        number.textContent = commafy(total);
      }
      target = total;
      if (!frame) frame = requestAnimationFrame(tick);
      return data.message;
    },
    destroy() {
      if (frame) cancelAnimationFrame(frame);
    },
  };
}
