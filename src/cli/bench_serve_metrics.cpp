#include "cli/bench_serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace deepinfer::cli {

namespace {

// numpy's default ("linear"): the value at rank p/100 * (n - 1) of the sorted list, interpolated.
double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

// The busiest second of the run (vLLM's peak output throughput and the concurrency then): one
// bucket per whole second from the first successful request's start.
void peak_second(const std::vector<RequestOutcome>& outcomes, ServeMetrics& m) {
  double first = INFINITY, last = -INFINITY;
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) continue;
    first = std::min(first, o.start);
    last = std::max(last, o.start + o.latency);
  }
  if (!(first <= last)) return;
  const size_t n = static_cast<size_t>(std::ceil(last - first)) + 1;
  std::vector<double> tokens(n, 0.0), requests(n, 0.0);
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) continue;
    double t = o.start + o.ttft;
    auto add_token = [&](double at) {
      const double second = std::floor(at - first);
      if (second >= 0 && second < static_cast<double>(n)) tokens[static_cast<size_t>(second)] += 1;
    };
    add_token(t);
    for (double gap : o.itl) add_token(t += gap);
    const size_t from = static_cast<size_t>(o.start - first);
    const size_t to = std::min(n - 1, static_cast<size_t>(o.start + o.latency - first));
    for (size_t s = from; s <= to; ++s) requests[s] += 1;
  }
  m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  m.max_concurrent_requests = static_cast<int64_t>(*std::max_element(requests.begin(), requests.end()));
}

}  // namespace

Summary summarize(std::vector<double> values, const std::vector<double>& percentiles) {
  Summary s;
  s.percentiles.assign(percentiles.size(), 0.0);
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0.0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(squares / n);
  s.median = percentile_sorted(values, 50.0);
  for (size_t i = 0; i < percentiles.size(); ++i) s.percentiles[i] = percentile_sorted(values, percentiles[i]);
  return s;
}

ServeMetrics compute_metrics(const std::vector<RequestOutcome>& outcomes, double duration_s, const Slo& slo,
                             const std::vector<double>& percentiles) {
  ServeMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  int64_t good = 0;
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += o.prompt_len;
    m.total_output += o.output_len;
    double tpot = 0.0;  // counted as 0 against a TPOT SLO when there is one token
    if (o.output_len > 1) {
      tpot = (o.latency - o.ttft) / static_cast<double>(o.output_len - 1);
      tpots.push_back(tpot);
    }
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    const bool met = (!slo.ttft_ms || o.ttft * 1000.0 <= *slo.ttft_ms) && (!slo.tpot_ms || tpot * 1000.0 <= *slo.tpot_ms) &&
                     (!slo.e2el_ms || o.latency * 1000.0 <= *slo.e2el_ms);
    if (slo.any() && met) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  m.request_throughput = static_cast<double>(m.completed) / d;
  m.request_goodput = static_cast<double>(good) / d;
  m.output_throughput = static_cast<double>(m.total_output) / d;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / d;
  m.ttft = summarize(std::move(ttfts), percentiles);
  m.tpot = summarize(std::move(tpots), percentiles);
  m.itl = summarize(std::move(itls), percentiles);
  m.e2el = summarize(std::move(e2els), percentiles);
  peak_second(outcomes, m);
  return m;
}

}  // namespace deepinfer::cli
