// Reading the Prometheus text format (0.0.4) that /metrics serves, and quantiles of its
// histograms as Prometheus's histogram_quantile computes them (linear within a bucket).

// name -> [{labels: {k: v}, value}], for every sample line.
export function parseMetrics(text) {
  const metrics = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    const value = match[4] === '+Inf' ? Infinity : Number(match[4]);
    if (!metrics.has(match[1])) metrics.set(match[1], []);
    metrics.get(match[1]).push({ labels, value });
  }
  return metrics;
}

// The first sample of `name` (its sum over labels when `sum`), or null.
export function value(metrics, name, { sum = false } = {}) {
  const samples = metrics.get(name);
  if (!samples || !samples.length) return null;
  return sum ? samples.reduce((a, s) => a + s.value, 0) : samples[0].value;
}

// A histogram's cumulative buckets [{le, count}] ascending, +Inf last.
export function buckets(metrics, name) {
  return (metrics.get(`${name}_bucket`) || [])
    .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), count: s.value }))
    .sort((a, b) => a.le - b.le);
}

// The q-quantile of the observations between two scrapes of one histogram (null: none).
export function quantile(q, now, before) {
  const counts = now.map((b, i) => ({ le: b.le, count: b.count - (before && before[i] ? before[i].count : 0) }));
  const total = counts.length ? counts[counts.length - 1].count : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const b of counts) {
    if (b.count >= rank) {
      if (b.le === Infinity) return lowerBound;  // beyond the last finite bound: report that bound
      const inBucket = b.count - lowerCount;
      return inBucket > 0 ? lowerBound + (b.le - lowerBound) * ((rank - lowerCount) / inBucket) : b.le;
    }
    lowerBound = b.le;
    lowerCount = b.count;
  }
  return lowerBound;
}
