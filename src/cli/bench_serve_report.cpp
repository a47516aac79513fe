#include "cli/bench_serve_report.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace deepinfer::cli {

namespace {

using Json = nlohmann::ordered_json;

// "99" for 99, "99.9" for 99.9: vLLM's key names (p99_ttft_ms).
std::string percentile_word(double p) {
  char buf[32];
  if (p == std::floor(p)) std::snprintf(buf, sizeof buf, "%d", static_cast<int>(p));
  else std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

std::string line(const char* label, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-40s %-10s\n", label, value.c_str());
  return buf;
}

std::string num(double v, const char* f = "%.2f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string header(const std::string& text, char fill) {
  const size_t width = 50;
  const size_t pad = text.size() < width ? width - text.size() : 0;
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill) + "\n";
}

void add_summary(Json& j, const char* name, const Summary& s, const std::vector<double>& percentiles) {
  const std::string n(name);
  j["mean_" + n + "_ms"] = s.mean * 1000;
  j["median_" + n + "_ms"] = s.median * 1000;
  j["std_" + n + "_ms"] = s.std * 1000;
  for (size_t i = 0; i < percentiles.size(); ++i) {
    std::string key(1, 'p');  // not "p" + ...: GCC 12 warns (-Wrestrict, a false positive)
    key += percentile_word(percentiles[i]);
    key += "_" + n + "_ms";
    j[key] = s.percentiles[i] * 1000;
  }
}

Json rate_json(double rate) { return std::isfinite(rate) ? Json(rate) : Json("inf"); }

}  // namespace

std::string result_table(const RunParameters& p, const ServeMetrics& m, double duration_s) {
  std::string s = header(" Serving Benchmark Result ", '=');
  s += line("Successful requests:", std::to_string(m.completed));
  s += line("Failed requests:", std::to_string(m.failed));
  if (p.max_concurrency > 0) s += line("Maximum request concurrency:", std::to_string(p.max_concurrency));
  if (std::isfinite(p.request_rate)) s += line("Request rate configured (RPS):", num(p.request_rate));
  s += line("Benchmark duration (s):", num(duration_s));
  s += line("Total input tokens:", std::to_string(m.total_input));
  s += line("Total generated tokens:", std::to_string(m.total_output));
  s += line("Request throughput (req/s):", num(m.request_throughput));
  if (p.slo.any()) s += line("Request goodput (req/s):", num(m.request_goodput));
  s += line("Output token throughput (tok/s):", num(m.output_throughput));
  s += line("Peak output token throughput (tok/s):", num(m.max_output_tokens_per_s));
  s += line("Peak concurrent requests:", std::to_string(m.max_concurrent_requests));
  s += line("Total token throughput (tok/s):", num(m.total_token_throughput));
  struct Block {
    const char* key;
    const char* title;
    const Summary* summary;
  };
  for (const Block& b : {Block{"TTFT", " Time to First Token ", &m.ttft}, Block{"TPOT", " Time per Output Token (excl. 1st token) ", &m.tpot},
                         Block{"ITL", " Inter-token Latency ", &m.itl}, Block{"E2EL", " End-to-end Latency ", &m.e2el}}) {
    s += header(b.title, '-');
    s += line(("Mean " + std::string(b.key) + " (ms):").c_str(), num(b.summary->mean * 1000));
    s += line(("Median " + std::string(b.key) + " (ms):").c_str(), num(b.summary->median * 1000));
    for (size_t i = 0; i < p.percentiles.size(); ++i) {
      std::string label(1, 'P');  // not "P" + ...: GCC 12 warns (-Wrestrict, a false positive)
      label += percentile_word(p.percentiles[i]);
      label += std::string(" ") + b.key + " (ms):";
      s += line(label.c_str(), num(b.summary->percentiles[i] * 1000));
    }
  }
  s += std::string(50, '=') + "\n";
  if (!p.exact_input_lengths) s += "note: the server has no /tokenize; input lengths are estimates (one token per word)\n";
  return s;
}

std::string result_json(const RunParameters& p, const ServeMetrics& m, double duration_s,
                        const std::vector<RequestOutcome>& outcomes, bool with_details) {
  Json j;
  j["date"] = p.date;
  j["label"] = p.label;
  j["endpoint_type"] = p.endpoint_type;
  j["base_url"] = p.base_url;
  j["model_id"] = p.model_id;
  j["dataset_name"] = p.dataset_name;
  j["num_prompts"] = p.num_prompts;
  j["request_rate"] = rate_json(p.request_rate);
  j["burstiness"] = p.burstiness;
  j["max_concurrency"] = p.max_concurrency > 0 ? Json(p.max_concurrency) : Json(nullptr);
  j["seed"] = p.seed;
  j["exact_input_lengths"] = p.exact_input_lengths;
  j["ignore_eos"] = p.exact_output;
  Json goodput = Json::object();
  if (p.slo.ttft_ms) goodput["ttft"] = *p.slo.ttft_ms;
  if (p.slo.tpot_ms) goodput["tpot"] = *p.slo.tpot_ms;
  if (p.slo.e2el_ms) goodput["e2el"] = *p.slo.e2el_ms;
  j["goodput"] = goodput;
  j["duration"] = duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = p.slo.any() ? Json(m.request_goodput) : Json(nullptr);
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  add_summary(j, "ttft", m.ttft, p.percentiles);
  add_summary(j, "tpot", m.tpot, p.percentiles);
  add_summary(j, "itl", m.itl, p.percentiles);
  add_summary(j, "e2el", m.e2el, p.percentiles);
  if (with_details) {
    Json input_lens = Json::array(), output_lens = Json::array(), ttfts = Json::array(), itls = Json::array(),
         errors = Json::array();
    for (const RequestOutcome& o : outcomes) {
      input_lens.push_back(o.prompt_len);
      output_lens.push_back(o.success ? o.output_len : 0);
      ttfts.push_back(o.ttft);
      itls.push_back(o.itl);
      errors.push_back(o.error);
    }
    j["input_lens"] = std::move(input_lens);
    j["output_lens"] = std::move(output_lens);
    j["ttfts"] = std::move(ttfts);
    j["itls"] = std::move(itls);
    j["errors"] = std::move(errors);
  }
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

std::string sweep_json(const std::vector<std::string>& result_jsons) {
  Json list = Json::array();
  for (const std::string& r : result_jsons) list.push_back(Json::parse(r));
  Json j;
  j["sweep"] = std::move(list);
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace deepinfer::cli
