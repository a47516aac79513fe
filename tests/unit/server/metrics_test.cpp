#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

namespace deepinfer::server {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Metrics, RendersEachKindInTextFormat004) {
  MetricsRegistry registry;
  registry.counter("deepinfer_prompt_tokens_total", "Prompt tokens processed.").inc(42);
  registry.gauge("deepinfer_num_requests_running", "Requests running now.").set(3);
  Histogram& ttft = registry.histogram("deepinfer_ttft_seconds", "Time to first token.", {0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 20.0}) ttft.observe(v);

  std::string text = registry.render();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::vector<std::string> expected = {
      "# HELP deepinfer_prompt_tokens_total Prompt tokens processed.",
      "# TYPE deepinfer_prompt_tokens_total counter",
      "deepinfer_prompt_tokens_total 42",
      "# HELP deepinfer_num_requests_running Requests running now.",
      "# TYPE deepinfer_num_requests_running gauge",
      "deepinfer_num_requests_running 3",
      "# HELP deepinfer_ttft_seconds Time to first token.",
      "# TYPE deepinfer_ttft_seconds histogram",
      "deepinfer_ttft_seconds_bucket{le=\"0.1\"} 2",
      "deepinfer_ttft_seconds_bucket{le=\"1\"} 3",
      "deepinfer_ttft_seconds_bucket{le=\"10\"} 3",
      "deepinfer_ttft_seconds_bucket{le=\"+Inf\"} 4",
      "deepinfer_ttft_seconds_sum 20.65",
      "deepinfer_ttft_seconds_count 4",
  };
  EXPECT_EQ(lines_of(text), expected);
}

TEST(Metrics, HistogramBucketsAreInclusiveAndCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.0, 1.0, 1.5, 2.0, 2.0, 4.9, 5.0, 5.1, 100.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 5, 7, 9}));
  EXPECT_DOUBLE_EQ(h.sum(), 0 + 1 + 1.5 + 2 + 2 + 4.9 + 5 + 5.1 + 100);

  Histogram empty({0.5});
  EXPECT_EQ(empty.cumulative_counts(), (std::vector<uint64_t>{0, 0}));
}

TEST(Metrics, NumbersAreSpelledTheWayPrometheusParsesThem) {
  MetricsRegistry registry;
  registry.gauge("a", "").set(0.1);
  registry.gauge("b", "").set(1e21);
  registry.gauge("c", "").set(std::numeric_limits<double>::infinity());
  registry.gauge("d", "").set(-std::numeric_limits<double>::infinity());
  registry.gauge("e", "").set(std::nan(""));
  registry.gauge("f", "").set(-2.5);
  registry.gauge("g", "").set(123456789);
  std::vector<std::string> lines = lines_of(registry.render());
  std::vector<std::string> values;
  for (const auto& line : lines) {
    if (line[0] != '#') values.push_back(line);
  }
  EXPECT_EQ(values, (std::vector<std::string>{"a 0.1", "b 1e+21", "c +Inf", "d -Inf", "e NaN", "f -2.5",
                                              "g 123456789"}));
}

TEST(Metrics, HelpTextEscapesBackslashAndNewline) {
  MetricsRegistry registry;
  registry.counter("x_total", "line one\nback\\slash \"quoted\"");
  EXPECT_EQ(lines_of(registry.render())[0], "# HELP x_total line one\\nback\\\\slash \"quoted\"");
}

TEST(Metrics, RegisteringANameTwiceReturnsTheFirstMetric) {
  MetricsRegistry registry;
  Counter& a = registry.counter("requests_total", "first help");
  Counter& b = registry.counter("requests_total", "second help");
  EXPECT_EQ(&a, &b);
  b.inc(2);
  EXPECT_EQ(a.value(), 2);
  std::string text = registry.render();
  EXPECT_NE(text.find("first help"), std::string::npos);
  EXPECT_EQ(text.find("second help"), std::string::npos);
}

TEST(Metrics, RefreshersRunBeforeEveryRender) {
  MetricsRegistry registry;
  Gauge& g = registry.gauge("kv_usage", "KV usage.");
  int calls = 0;
  registry.on_render([&] { g.set(++calls * 0.25); });
  EXPECT_NE(registry.render().find("kv_usage 0.25\n"), std::string::npos);
  EXPECT_NE(registry.render().find("kv_usage 0.5\n"), std::string::npos);
  EXPECT_EQ(calls, 2);
}

TEST(Metrics, ConcurrentUpdatesSumCorrectly) {
  MetricsRegistry registry;
  Counter& c = registry.counter("c_total", "");
  Histogram& h = registry.histogram("h", "", {0.5});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        c.inc();
        h.observe(t % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), double{kThreads} * kPerThread);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{kThreads / 2 * kPerThread, kThreads * kPerThread}));
  EXPECT_DOUBLE_EQ(h.sum(), kThreads / 2 * kPerThread * 0.25 + kThreads / 2 * kPerThread * 1.0);
}

TEST(Metrics, GaugeFamiliesRenderOneLabelledSamplePerValue) {
  MetricsRegistry r;
  GaugeFamily& f = r.gauge_family("kv_blocks", "Blocks per group.", "group");
  f.with("full").set(3);
  f.with("sli\"ding").set(1.5);
  f.with("full").set(4);
  EXPECT_EQ(&r.gauge_family("kv_blocks", "again", "group"), &f);
  EXPECT_EQ(r.render(),
            "# HELP kv_blocks Blocks per group.\n# TYPE kv_blocks gauge\n"
            "kv_blocks{group=\"full\"} 4\nkv_blocks{group=\"sli\\\"ding\"} 1.5\n");
}

}  // namespace
}  // namespace deepinfer::server
