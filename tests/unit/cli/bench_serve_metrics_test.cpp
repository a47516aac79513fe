// bench serve's metrics on synthetic timings, against values computed by hand with vLLM's
// definitions (numpy's linear percentiles, population std, TPOT without the first token).
#include <gtest/gtest.h>

#include <cmath>

#include "cli/bench_serve_metrics.h"

namespace deepinfer::cli {
namespace {

TEST(BenchServeMetrics, SummaryIsNumpys) {
  Summary s = summarize({10, 1, 4, 2, 3}, {50, 90, 99});
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_NEAR(s.std, std::sqrt(10.0), 1e-12);      // (9 + 4 + 1 + 0 + 36) / 5 = 10
  EXPECT_DOUBLE_EQ(s.percentiles[0], 3.0);
  EXPECT_NEAR(s.percentiles[1], 7.6, 1e-12);       // rank 3.6: 4 + 0.6 (10 - 4)
  EXPECT_NEAR(s.percentiles[2], 9.76, 1e-12);      // rank 3.96
  Summary empty = summarize({}, {99});
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.percentiles[0], 0.0);
}

RequestOutcome done(double start, double ttft, double latency, int64_t out, double gap, int64_t in = 100) {
  RequestOutcome o;
  o.success = true;
  o.start = start;
  o.ttft = ttft;
  o.latency = latency;
  o.output_len = out;
  o.prompt_len = in;
  o.itl.assign(static_cast<size_t>(out - 1), gap);
  return o;
}

TEST(BenchServeMetrics, TtftTpotItlE2elThroughputAndGoodput) {
  std::vector<RequestOutcome> outcomes = {
      done(0.0, 0.1, 1.0, 10, 0.1),   // TPOT (1.0 - 0.1) / 9 = 0.1
      done(0.5, 0.3, 2.1, 10, 0.2),   // TPOT (2.1 - 0.3) / 9 = 0.2
      RequestOutcome{},               // failed: counted, not timed
      done(1.0, 0.2, 0.2, 1, 0.0),    // one token: no TPOT (0 against the SLO)
  };
  outcomes[2].error = "HTTP 500: boom";
  Slo slo;
  slo.ttft_ms = 250;
  slo.tpot_ms = 150;
  ServeMetrics m = compute_metrics(outcomes, 4.0, slo, {90});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 300);
  EXPECT_EQ(m.total_output, 21);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(m.output_throughput, 21 / 4.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 321 / 4.0);
  EXPECT_DOUBLE_EQ(m.request_goodput, 0.5);  // the first and the last meet both SLOs
  EXPECT_NEAR(m.ttft.median, 0.2, 1e-12);
  EXPECT_NEAR(m.ttft.percentiles[0], 0.28, 1e-12);  // sorted 0.1 0.2 0.3, rank 1.8
  EXPECT_NEAR(m.tpot.mean, 0.15, 1e-12);
  EXPECT_NEAR(m.tpot.median, 0.15, 1e-12);
  EXPECT_NEAR(m.itl.median, 0.15, 1e-12);  // 9 gaps of 0.1 and 9 of 0.2, pooled
  EXPECT_NEAR(m.itl.mean, 0.15, 1e-12);
  EXPECT_NEAR(m.e2el.mean, 3.3 / 3, 1e-12);
  EXPECT_NEAR(m.e2el.percentiles[0], 1.0 + 0.8 * 1.1, 1e-12);  // sorted 0.2 1.0 2.1, rank 1.8
  // Whole seconds from the first start: the three successful requests are all active in [1, 2).
  EXPECT_EQ(m.max_concurrent_requests, 3);
}

TEST(BenchServeMetrics, NoGoodputWithoutSlo) {
  ServeMetrics m = compute_metrics({done(0, 0.1, 0.5, 5, 0.1)}, 1.0, Slo{}, {99});
  EXPECT_EQ(m.request_goodput, 0.0);
  EXPECT_EQ(m.completed, 1);
}

TEST(BenchServeMetrics, PeakSecondCountsTokensByArrival) {
  // Five tokens at 0.1, 0.3, 0.5, 0.7, 0.9 and five at 1.1 ... 1.9: ten in [0, 1) would be wrong.
  RequestOutcome a = done(0.0, 0.1, 0.9, 5, 0.2);
  RequestOutcome b = done(1.0, 0.1, 0.9, 5, 0.2);
  ServeMetrics m = compute_metrics({a, b}, 2.0, Slo{}, {});
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 5.0);
}

}  // namespace
}  // namespace deepinfer::cli
