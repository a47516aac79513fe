// The metrics of `deepinfer bench serve`, defined as vLLM's `vllm bench serve` defines them
// (vllm/benchmarks/serve.py, calculate_metrics), on plain per-request timings:
//
//   TTFT  time from sending a request to its first streamed choice event
//   ITL   the gap between consecutive choice events of a request (all requests' gaps pooled)
//   TPOT  per request with more than one output token: (E2EL - TTFT) / (output tokens - 1)
//   E2EL  time from sending a request to its last event
//   throughput: completed requests, output tokens, and input + output tokens per second of the
//   whole run; goodput: completed requests per second that met every SLO given (TTFT, TPOT,
//   E2EL in ms; a request of one output token has TPOT 0 there, as in vLLM)
//
// Statistics as numpy computes them: mean, population std, median and percentiles with linear
// interpolation between order statistics; an empty list gives 0 everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer::cli {

// One request as the client saw it. Times in seconds; `start` from the run's start.
struct RequestOutcome {
  bool success = false;
  double start = 0.0;
  double ttft = 0.0;
  double latency = 0.0;
  std::vector<double> itl;
  int64_t prompt_len = 0;   // the dataset's count (vLLM's input_lens)
  int64_t output_len = 0;   // the server's usage count, else the generated text's token count
  std::string generated_text;
  std::string error;        // "" when success
};

struct Summary {
  double mean = 0.0, median = 0.0, std = 0.0;
  std::vector<double> percentiles;  // one per requested percentile, same order
};

// numpy.percentile(values, p) for each p in [0, 100] (linear), mean, std (ddof 0), median.
Summary summarize(std::vector<double> values, const std::vector<double>& percentiles);

// SLOs in milliseconds; an absent one is not checked.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

struct ServeMetrics {
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0.0, request_goodput = 0.0;
  double output_throughput = 0.0, total_token_throughput = 0.0;
  Summary ttft, tpot, itl, e2el;  // seconds
  double max_output_tokens_per_s = 0.0;  // the busiest whole second of the run
  int64_t max_concurrent_requests = 0;
};

ServeMetrics compute_metrics(const std::vector<RequestOutcome>& outcomes, double duration_s, const Slo& slo,
                             const std::vector<double>& percentiles);

}  // namespace deepinfer::cli
