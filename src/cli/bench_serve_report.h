// What `deepinfer bench serve` prints and saves: the table on stdout (vLLM's layout) and the
// result object (vLLM's keys: the run's parameters, the metrics with mean_/median_/std_/pNN_
// prefixes in ms, and the per-request lists input_lens, output_lens, ttfts, itls, errors).
#pragma once

#include <string>
#include <vector>

#include "cli/bench_serve_metrics.h"

namespace deepinfer::cli {

// The run's parameters, written first in the result.
struct RunParameters {
  std::string date, label, endpoint_type, base_url, model_id, dataset_name;
  int64_t num_prompts = 0;
  double request_rate = 0, burstiness = 1;
  int64_t max_concurrency = 0;  // 0: none
  uint64_t seed = 0;
  bool exact_input_lengths = true;  // counted by the server's tokenizer (false: one token per word)
  bool exact_output = true;         // ignore_eos + min_tokens were sent
  std::vector<double> percentiles;
  Slo slo;
};

std::string result_table(const RunParameters& p, const ServeMetrics& m, double duration_s);

// One result as JSON text (`with_details`: the per-request lists too).
std::string result_json(const RunParameters& p, const ServeMetrics& m, double duration_s,
                        const std::vector<RequestOutcome>& outcomes, bool with_details);

// A sweep's results, one JSON object holding the list.
std::string sweep_json(const std::vector<std::string>& result_jsons);

}  // namespace deepinfer::cli
