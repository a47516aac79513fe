// The dashboard (/ui): /metrics polled every second into charts of requests running and
// waiting, throughput, TTFT and ITL percentiles, KV cache usage and hit rates; the model and
// engine configuration from /v1/info. ?interval=MS sets the polling period.
import { apiFetch, apiJson, ApiError, el, fmt, initPage, loadServedModel } from './common.js';
import { LineChart } from './chart.js';
import { buckets, parseMetrics, quantile, value } from './prom.js';

const $ = (id) => document.getElementById(id);
const P = 'deepinfer:';
const WINDOW_S = 10;  // latency percentiles and hit rates over this many seconds

const interval = Math.max(200, Number(new URLSearchParams(location.search).get('interval')) || 1000);
const history = [];   // [{t, metrics}] of the last WINDOW_S seconds and a little more
let charts = null;
let tiles = null;

function makeTiles() {
  const names = [['running', 'requests running'], ['waiting', 'requests waiting'], ['gen', 'generated tokens/s'],
    ['ttft', 'TTFT p50 (ms)'], ['kv', 'KV cache in use'], ['hit', 'prefix cache hit rate']];
  const out = {};
  $('tiles').replaceChildren(...names.map(([key, label]) => {
    out[key] = el('div', { class: 'value', id: `tile-${key}`, text: '–' });
    return el('div', { class: 'tile' }, out[key], el('div', { class: 'label', text: label }));
  }));
  return out;
}

function makeCharts() {
  const parent = $('charts');
  return {
    requests: new LineChart(parent, { id: 'chart-requests', title: 'Requests', series: ['running', 'waiting'] }),
    throughput: new LineChart(parent, { id: 'chart-throughput', title: 'Throughput (tokens/s)',
      series: ['generated', 'prompt computed'] }),
    ttft: new LineChart(parent, { id: 'chart-ttft', title: 'Time to first token (ms)', series: ['p50', 'p90', 'p99'] }),
    itl: new LineChart(parent, { id: 'chart-itl', title: 'Inter-token latency (ms)', series: ['p50', 'p90', 'p99'] }),
    kv: new LineChart(parent, { id: 'chart-kv', title: 'KV cache in use (%)', series: ['blocks in use'] }),
    hits: new LineChart(parent, { id: 'chart-hits', title: 'Hit rate (%)', series: ['prefix cache', 'KV store'] }),
  };
}

// Per second between two scrapes of a counter (null before the second scrape).
function rate(name, now, before) {
  if (!before) return null;
  const dt = (now.t - before.t) / 1000;
  const a = value(now.metrics, name, { sum: true });
  const b = value(before.metrics, name, { sum: true });
  if (a === null || b === null || dt <= 0) return null;
  return Math.max(0, a - b) / dt;
}

function ratio(hitsName, missName, now, before, { missIsTotal = false } = {}) {
  const delta = (name) => (value(now.metrics, name) ?? 0) - (before ? value(before.metrics, name) ?? 0 : 0);
  if (value(now.metrics, hitsName) === null) return null;
  const hits = delta(hitsName);
  const total = missIsTotal ? delta(missName) : hits + delta(missName);
  return total > 0 ? (100 * hits) / total : null;
}

function percentiles(name, now, before, qs) {
  const current = buckets(now.metrics, name);
  const old = before ? buckets(before.metrics, name) : null;
  return qs.map((q) => {
    const seconds = quantile(q, current, old);
    return seconds === null ? null : seconds * 1000;
  });
}

function update(now) {
  history.push(now);
  while (history.length > 2 && now.t - history[1].t > WINDOW_S * 1000) history.shift();
  const previous = history.length > 1 ? history[history.length - 2] : null;
  const windowStart = history.length > 1 ? history[0] : null;
  const m = now.metrics;
  const running = value(m, `${P}num_requests_running`);
  const waiting = value(m, `${P}num_requests_waiting`);
  const gen = rate(`${P}generation_tokens_total`, now, previous);
  const prompt = rate(`${P}prompt_tokens_total`, now, previous);
  const ttft = percentiles(`${P}time_to_first_token_seconds`, now, windowStart, [0.5, 0.9, 0.99]);
  const itl = percentiles(`${P}inter_token_latency_seconds`, now, windowStart, [0.5, 0.9, 0.99]);
  const kv = value(m, `${P}kv_cache_usage_perc`);
  const prefixHit = ratio(`${P}prefix_cache_hits_total`, `${P}prefix_cache_queries_total`, now, windowStart,
    { missIsTotal: true });
  const storeHit = ratio(`${P}kv_store_hit_pages_total`, `${P}kv_store_miss_pages_total`, now, windowStart);
  charts.requests.push([running, waiting]);
  charts.throughput.push([gen, prompt]);
  charts.ttft.push(ttft);
  charts.itl.push(itl);
  charts.kv.push([kv === null ? null : kv * 100]);
  charts.hits.push([prefixHit, storeHit]);
  tiles.running.textContent = fmt(running);
  tiles.waiting.textContent = fmt(waiting);
  tiles.gen.textContent = fmt(gen);
  tiles.ttft.textContent = fmt(ttft[0]);
  tiles.kv.textContent = kv === null ? '–' : `${fmt(kv * 100)} %`;
  tiles.hit.textContent = prefixHit === null ? '–' : `${fmt(prefixHit)} %`;
}

async function poll() {
  try {
    const response = await apiFetch('/metrics');
    update({ t: performance.now(), metrics: parseMetrics(await response.text()) });
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (error) {
    if (!(error instanceof ApiError) && !(error instanceof TypeError)) throw error;
    // The server is gone or restarting: keep polling, the charts resume when it answers.
  }
  setTimeout(poll, interval);
}

function fillTable(table, rows) {
  table.replaceChildren(...rows.map(([name, v]) => el('tr', {}, el('td', { text: name }),
    el('td', { text: typeof v === 'boolean' ? (v ? 'on' : 'off') : String(v) }))));
}

function mib(bytes) {
  return `${fmt(bytes / (1 << 20))} MiB`;
}

async function loadConfig() {
  if ((await loadServedModel()) === null) return;
  const info = await apiJson('/v1/info');
  fillTable($('model-config'), [
    ['served name', info.model], ['file', info.engine.model_file], ['prompt format', info.prompt_format],
    ['context (tokens)', info.max_model_len], ['vocabulary', info.n_vocab],
    ['KV cache', `${info.kv_cache.blocks_total} blocks of ${info.kv_cache.block_size} tokens, ${mib(info.kv_cache.bytes)}`],
    ...info.kv_cache.groups.map((g) => [`KV group ${g.name}`, `${g.blocks_total} blocks, ${mib(g.bytes)}`]),
  ]);
  const e = info.engine;
  fillTable($('engine-config'), [
    ['backend', e.backend], ['threads', e.threads || 'all cores'], ['max sequences', e.max_num_seqs],
    ['max queue', info.max_queue], ['max batched tokens', e.max_num_batched_tokens],
    ['KV cache dtype', e.kv_cache_dtype], ['prefix caching', e.prefix_caching], ['KV store', e.kv_store],
    ['async scheduling', e.async_scheduling], ['batch invariant', e.batch_invariant],
  ]);
}

function start() {
  initPage('/ui');
  tiles = makeTiles();
  charts = makeCharts();
  window.addEventListener('resize', () => Object.values(charts).forEach((c) => c.draw()));
  document.addEventListener('api-key-changed', loadConfig);
  loadConfig();
  poll();
}

start();
