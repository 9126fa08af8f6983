// Line charts drawn as SVG by our own code: the last hour of a topic's or channel's
// publish rate, delivery rate and depth, from the admin's history samples.
import {commafy, compact, h, rate} from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 360;
const H = 140;
const PAD = {left: 46, right: 8, top: 10, bottom: 20};

function s(tag, attrs = {}, text = null) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== null) el.textContent = text;
  return el;
}

/** A round upper bound for the y axis: 1, 2, 5 x 10^n at or above max. */
export function niceMax(max) {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

/**
 * A chart panel: new Chart(title, {format, color}); chart.el is the element to place;
 * chart.update(points, windowSeconds) redraws from [[unixSeconds, value], ...].
 */
export class Chart {
  constructor(title, {format = rate, color = '#2b6cb0', unit = ''} = {}) {
    this.format = format;
    this.color = color;
    this.svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img'});
    this.value = h('span.chart-value');
    this.el = h('figure.chart-panel', null,
      h('figcaption', null, h('span.chart-title', null, title, unit ? h('span.chart-unit', null, ` ${unit}`) : null),
        this.value),
      this.svg);
    this.el.dataset.chart = title;
  }

  /**
   * Redraw from series [{label, color, points: [[unixSeconds, value], ...]}] (or one
   * points array) over the last windowSeconds.
   */
  update(series, windowSeconds = 3600, now = Date.now() / 1000) {
    if (!series.length || Array.isArray(series[0])) series = [{label: '', color: this.color, points: series}];
    const svg = this.svg;
    svg.replaceChildren();
    const x0 = PAD.left;
    const x1 = W - PAD.right;
    const y0 = H - PAD.bottom;
    const y1 = PAD.top;
    const start = now - windowSeconds;
    const lines = series.map((sr) => ({...sr, points: sr.points.filter(
      ([t, v]) => t >= start && v !== null && v !== undefined && Number.isFinite(Number(v)))}));
    const all = lines.flatMap((l) => l.points.map(([, v]) => Number(v)));
    const top = niceMax(Math.max(0, ...all));
    const xs = (t) => x0 + ((t - start) / windowSeconds) * (x1 - x0);
    const ys = (v) => y0 - (v / top) * (y0 - y1);

    for (const frac of [0, 0.5, 1]) {
      const y = ys(top * frac);
      svg.append(s('line', {x1: x0, x2: x1, y1: y, y2: y, class: frac ? 'grid' : 'axis'}));
      svg.append(s('text', {x: x0 - 4, y: y + 3, class: 'ylabel', 'text-anchor': 'end'}, compact(top * frac)));
    }
    const minutes = Math.round(windowSeconds / 60);
    for (const [frac, label] of [[0, `-${minutes}m`], [0.5, `-${Math.round(minutes / 2)}m`], [1, 'now']]) {
      const x = x0 + frac * (x1 - x0);
      svg.append(s('text', {x, y: H - 5, class: 'xlabel',
        'text-anchor': frac === 0 ? 'start' : frac === 1 ? 'end' : 'middle'}, label));
    }
    this.el.dataset.points = String(all.length);
    if (all.length === 0) {
      svg.append(s('text', {x: (x0 + x1) / 2, y: (y0 + y1) / 2, class: 'nodata', 'text-anchor': 'middle'},
        'no samples yet'));
      this.value.textContent = '';
      return;
    }
    const values = [];
    lines.forEach((l, i) => {
      if (!l.points.length) return;
      const color = l.color || this.color;
      const line = l.points.map(([t, v]) => `${xs(t).toFixed(1)},${ys(Number(v)).toFixed(1)}`).join(' ');
      if (i === 0) {
        const first = xs(l.points[0][0]).toFixed(1);
        const last = xs(l.points[l.points.length - 1][0]).toFixed(1);
        svg.append(s('polygon', {points: `${first},${y0} ${line} ${last},${y0}`, class: 'area', fill: color}));
      }
      svg.append(s('polyline', {points: line, class: 'line', stroke: color}));
      const [lt, lv] = l.points[l.points.length - 1];
      svg.append(s('circle', {cx: xs(lt), cy: ys(Number(lv)), r: 2.5, fill: color}));
      values.push(l.label ? `${l.label} ${this.format(Number(lv))}` : this.format(Number(lv)));
    });
    this.value.textContent = values.join(' · ');
    this.el.dataset.last = String(lines[0].points.length ? lines[0].points[lines[0].points.length - 1][1] : '');
  }
}

/** Counts for the depth chart: whole numbers with commas. */
export const countFormat = (v) => commafy(v);

/**
 * The three charts of a topic or channel page (publish rate, delivery rate, depth) and
 * how to fill them from the history API's columns.
 */
export class HistoryCharts {
  constructor() {
    this.publish = new Chart('Publish rate', {unit: 'msg/s', color: '#2b6cb0'});
    this.delivery = new Chart('Delivery rate', {unit: 'msg/s', color: '#2f855a'});
    this.depth = new Chart('Depth', {format: countFormat, color: '#c05621'});
    this.el = h('div.charts', null, this.publish.el, this.delivery.el, this.depth.el);
  }

  /** Draw from one /api/history answer (columnar: ts, publish_rate, delivery_rate, depth). */
  update(history) {
    const ts = history.ts || [];
    const col = (name) => ts.map((t, i) => [t, (history[name] || [])[i]]);
    const now = ts.length ? Math.max(Date.now() / 1000, ts[ts.length - 1]) : Date.now() / 1000;
    // The last hour once the admin has sampled that long; until then what it has (at
    // least 5 minutes), so a freshly started admin's lines are not squeezed to the right.
    const full = history.window || 3600;
    const window = ts.length ? Math.min(full, Math.max(300, Math.ceil((now - ts[0]) / 60) * 60)) : full;
    this.publish.update(col('publish_rate'), window, now);
    this.delivery.update(col('delivery_rate'), window, now);
    if (history.channels_depth) {
      this.depth.update([
        {label: 'channels', color: '#c05621', points: col('channels_depth')},
        {label: 'topic', color: '#805ad5', points: col('depth')},
      ], window, now);
    } else {
      this.depth.update(col('depth'), window, now);
    }
  }
}
