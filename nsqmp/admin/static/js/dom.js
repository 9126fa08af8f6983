// DOM building and number formatting for the admin's pages.
//
// Every string that comes from the API (topic and channel names, client ids, hostnames,
// user agents, broker error text) goes into the page through textContent or an attribute
// set with setAttribute: never through innerHTML. h() is the only way the pages build
// elements, so that rule holds in one place.

/**
 * h('td#id.num', {title: 'x'}, 'text', child, ...) -> an Element.
 * Strings and numbers become text nodes; null/undefined/false children are skipped;
 * arrays are flattened. Attributes: 'class', 'on<event>' (a function), 'dataset'
 * (an object), anything else through setAttribute.
 */
export function h(tag, attrs, ...children) {
  const [head, ...classes] = tag.split('.');
  const [name, id] = head.split('#');
  const el = document.createElement(name || 'div');
  if (id) el.id = id;
  if (classes.length) el.className = classes.join(' ');
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith('on') && typeof value === 'function') {
        el.addEventListener(key.slice(2), value);
      } else if (key === 'class') {
        el.className = [el.className, value].filter(Boolean).join(' ');
      } else if (key === 'dataset') {
        Object.assign(el.dataset, value);
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

/** Append children (strings as text nodes) to el. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace everything inside el with children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** 1234567 -> "1,234,567" (nsqadmin's commafy); anything not a number -> "". */
export function commafy(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return '';
  return Math.round(Number(n)).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** A rate in messages per second, short: "0", "3.4", "1,234". */
export function rate(r) {
  if (r === null || r === undefined || Number.isNaN(Number(r))) return '–';
  const v = Number(r);
  if (v === 0) return '0';
  if (Math.abs(v) < 10) return v.toFixed(1);
  return commafy(v);
}

/** An axis label: 950, 1.2k, 35k, 4.1M. */
export function compact(n) {
  const v = Number(n);
  if (!Number.isFinite(v)) return '';
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return a < 10 && a % 1 ? v.toFixed(1) : String(Math.round(v));
}

/** Nanoseconds -> "1.2ms", "3.4s", "2m 5s", "3h 2m" (nsqadmin's nanotohuman). */
export function nanotohuman(ns) {
  const v = Number(ns);
  if (!Number.isFinite(v)) return '';
  if (v < 1e3) return `${v.toFixed(0)}ns`;
  if (v < 1e6) return `${(v / 1e3).toFixed(1)}us`;
  if (v < 1e9) return `${(v / 1e6).toFixed(1)}ms`;
  return duration(v / 1e9);
}

/** Seconds -> "12s", "2m 5s", "3h 2m", "4d 3h". */
export function duration(seconds) {
  let s = Math.max(0, Math.floor(Number(seconds) || 0));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  return `${m}m ${s}s`;
}

/** 0.99 -> "p99", 0.5 -> "p50", 0.999 -> "p99.9". */
export function quantileLabel(q) {
  const p = Math.round(Number(q) * 1000) / 10;
  return `p${p}`;
}

/** A small coloured label ("paused", "TLS", ...). */
export function badge(text, kind = 'default', title = null) {
  return h(`span.badge.badge-${kind}`, {title}, text);
}

/** An error box; text is the message (inserted as text). */
export function alertBox(kind, title, text) {
  return h(`div.alert.alert-${kind}`, {role: 'alert'}, title ? h('strong', null, title, ' ') : null, text);
}
