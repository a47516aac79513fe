// A small line chart on a canvas: a rolling window of samples, one line per series, the y axis
// from zero to the largest value shown. Drawn with the canvas API only (no inline style, no
// library). The canvas's data attributes carry what is drawn (samples, last values, maximum),
// for the browser tests and for anyone inspecting the page.
import { el, fmt } from './common.js';

const COLORS = ['#2f6fde', '#e8590c', '#2b8a3e'];

export class LineChart {
  constructor(parent, { id, title, series, unit = '', window = 120 }) {
    this.series = series;
    this.unit = unit;
    this.window = window;
    this.samples = [];  // [[v0, v1, ...]] per poll; null: no value
    this.canvas = el('canvas', { id, role: 'img', 'aria-label': title });
    this.legend = el('div', { class: 'legend' }, series.map((name, i) =>
      el('span', {}, el('span', { class: `swatch c${i}` }), name)));
    parent.append(el('section', { class: 'panel chart' }, el('h2', { text: title }), this.canvas, this.legend));
    this.canvas.dataset.samples = '0';
  }

  push(values) {
    this.samples.push(values);
    if (this.samples.length > this.window) this.samples.shift();
    const seen = this.samples.flat().filter((v) => v !== null && Number.isFinite(v));
    this.canvas.dataset.samples = String(this.samples.length);
    this.canvas.dataset.max = String(seen.length ? Math.max(...seen) : 0);
    this.canvas.dataset.last = JSON.stringify(values);
    this.draw();
  }

  draw() {
    const ratio = window.devicePixelRatio || 1;
    const width = this.canvas.clientWidth;
    const height = this.canvas.clientHeight;
    if (!width || !height) return;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    const g = this.canvas.getContext('2d');
    g.scale(ratio, ratio);
    const style = getComputedStyle(document.documentElement);
    const muted = style.getPropertyValue('--muted').trim() || '#888';
    const border = style.getPropertyValue('--border').trim() || '#ddd';
    const left = 46;
    const bottom = height - 18;
    const top = 8;
    const right = width - 8;
    const max = Math.max(Number(this.canvas.dataset.max) || 0, 1e-9);
    const yMax = niceCeiling(max);
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = muted;
    g.strokeStyle = border;
    g.lineWidth = 1;
    for (let i = 0; i <= 4; ++i) {
      const y = bottom - ((bottom - top) * i) / 4;
      g.beginPath();
      g.moveTo(left, y);
      g.lineTo(right, y);
      g.stroke();
      g.fillText(fmt((yMax * i) / 4) + this.unit, 2, y + 4);
    }
    g.fillText(`last ${this.window} s`, left, height - 4);
    const step = (right - left) / Math.max(this.window - 1, 1);
    const x0 = right - step * (this.samples.length - 1);
    this.series.forEach((_, s) => {
      g.strokeStyle = COLORS[s % COLORS.length];
      g.lineWidth = 2;
      g.beginPath();
      let drawing = false;
      this.samples.forEach((values, i) => {
        const v = values[s];
        if (v === null || !Number.isFinite(v)) {
          drawing = false;
          return;
        }
        const x = x0 + step * i;
        const y = bottom - ((bottom - top) * v) / yMax;
        if (drawing) g.lineTo(x, y);
        else g.moveTo(x, y);
        drawing = true;
      });
      g.stroke();
    });
  }
}

// 1, 2 or 5 times a power of ten, at least `v`.
function niceCeiling(v) {
  const power = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) {
    if (m * power >= v) return m * power;
  }
  return 10 * power;
}
