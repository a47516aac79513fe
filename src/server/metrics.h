// Metrics in the Prometheus text exposition format (version 0.0.4): counters, gauges and
// histograms with fixed bucket bounds. Updates are lock-free (atomics) and may come from any
// thread; render() takes a consistent-enough snapshot for scraping.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace deepinfer::server {

class Counter {
 public:
  void inc(double v = 1.0);
  double value() const;
 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v);
  double value() const;
 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double v);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative counts per bound, then the +Inf count; the sum of observations.
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const;
 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], not cumulative
  std::atomic<double> sum_{0.0};
};

// Gauges of one name told apart by one label (deepinfer:kv_cache_group_blocks_used{group="full"}).
// Children are made on first use and live as long as the family.
class GaugeFamily {
 public:
  explicit GaugeFamily(std::string label) : label_(std::move(label)) {}
  Gauge& with(const std::string& value);
  const std::string& label() const { return label_; }
  // (label value, current value) in first-use order.
  std::vector<std::pair<std::string, double>> values() const;

 private:
  std::string label_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, std::unique_ptr<Gauge>>> children_;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();  // out of line: Entry is complete only in metrics.cpp
  // Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*); registering a name twice returns
  // the first metric. References stay valid for the registry's lifetime.
  Counter& counter(const std::string& name, const std::string& help);
  Gauge& gauge(const std::string& name, const std::string& help);
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> upper_bounds);
  GaugeFamily& gauge_family(const std::string& name, const std::string& help, const std::string& label);
  // The same, exposed as counters: the owner sets each child from its own monotonic count
  // (typically in an on_render refresher), so a labelled total needs no second atomic type.
  GaugeFamily& counter_family(const std::string& name, const std::string& help, const std::string& label);
  // Called at the start of every render(), to refresh gauges from their sources.
  void on_render(std::function<void()> refresh);
  std::string render() const;

 private:
  struct Entry;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::function<void()>> refreshers_;
};

}  // namespace deepinfer::server
