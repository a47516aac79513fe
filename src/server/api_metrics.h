// The server's Prometheus metrics: engine state (refreshed from EngineStats at each scrape)
// and per-request latencies observed by the handlers. Names use the "deepinfer:" prefix.
// Thread-safe: handlers observe from their connection threads while /metrics renders.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include "deepinfer/engine.h"
#include "server/metrics.h"

namespace deepinfer::server {

class ApiMetrics {
  // First: the public references below are bound into it during construction.
  MetricsRegistry registry_;

 public:
  explicit ApiMetrics(const Engine& engine);
  ApiMetrics(const ApiMetrics&) = delete;
  ApiMetrics& operator=(const ApiMetrics&) = delete;

  std::string render() { return registry_.render(); }

  Gauge& requests_in_flight;  // admitted by the server, engine-side or not
  Counter& requests_finished;
  Counter& requests_rejected;  // 429
  Histogram& ttft;             // seconds from arrival to the first token
  Histogram& itl;              // seconds between tokens of one sequence
  Histogram& e2e;              // seconds from arrival to the last token
  Histogram& queue_time;       // seconds from submission to first scheduling
};

// Times one request's events and records them into ApiMetrics.
class RequestTimer {
 public:
  using Clock = std::chrono::steady_clock;
  RequestTimer(ApiMetrics& metrics, Clock::time_point arrival) : metrics_(metrics), arrival_(arrival) {}
  // An event with `n_tokens` new tokens arrived now (first_of_index: the first of its sequence).
  void on_event(size_t n_tokens, bool first_of_index, double queue_seconds);
  void on_end();

 private:
  ApiMetrics& metrics_;
  Clock::time_point arrival_;
  Clock::time_point last_{};
  bool any_token_ = false;
};

}  // namespace deepinfer::server
