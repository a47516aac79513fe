// deepinfer generate: offline batch inference through the engine. JSONL requests in, JSONL
// results out (in input order), throughput to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "deepinfer/engine.h"
#include "model/catalog.h"
#include "model/loader/tensor_source.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

namespace {

const char* kGenerateUsage = R"(usage: deepinfer generate [-m MODEL] --input FILE [--output FILE] [options]
  Each input line is a JSON object: {"prompt": "text"} or {"prompt_token_ids": [1, 2]}, with
  optional "max_tokens" (16), "temperature" (1.0), "top_p", "top_k", "min_p", "seed",
  "ignore_eos" (false), "cache_salt", "priority". All requests run concurrently through the engine;
  results are written one JSON object per line, in input order.
  --output FILE              results (default: stdout)
  --threads N                CPU threads (default: all cores)
  --max-num-seqs N           requests decoded together (default 64)
  --max-num-batched-tokens N tokens per engine step (default 2048)
  --kv-cache-tokens N        KV capacity in tokens (default: 16 contexts or 1 GiB)
  --no-prefix-caching        turn the prefix cache off
)";

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kNone: break;
  }
  return "none";
}

Result<GenerationRequest> parse_request(const nlohmann::json& j, const Tokenizer* tokenizer,
                                        const std::vector<int32_t>& end_of_generation, size_t line) {
  const std::string where = "input line " + std::to_string(line) + ": ";
  if (!j.is_object()) return invalid_argument(where + "expected a JSON object");
  GenerationRequest r;
  try {
    if (j.contains("prompt_token_ids")) {
      r.prompt = j.at("prompt_token_ids").get<std::vector<int32_t>>();
    } else if (j.contains("prompt")) {
      if (!tokenizer) return invalid_argument(where + "the model has no tokenizer; give prompt_token_ids");
      EncodeOptions options;
      options.add_bos = tokenizer->add_bos_by_default();
      r.prompt = tokenizer->encode(j.at("prompt").get<std::string>(), options);
    } else {
      return invalid_argument(where + "needs \"prompt\" or \"prompt_token_ids\"");
    }
    r.max_tokens = j.value("max_tokens", int64_t{16});
    r.sampling.temperature = j.value("temperature", 1.0f);
    r.sampling.top_p = j.value("top_p", 1.0f);
    r.sampling.top_k = j.value("top_k", 0);
    r.sampling.min_p = j.value("min_p", 0.0f);
    if (j.contains("seed")) r.sampling.seed = j.at("seed").get<uint64_t>();
    r.cache_salt = j.value("cache_salt", std::string());
    r.priority = j.value("priority", 0);
    if (!j.value("ignore_eos", false)) r.stop_token_ids = end_of_generation;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(where + "a field has the wrong type (" + e.what() + ")");
  }
  return r;
}

}  // namespace

int generate_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--input", "--output", "--threads", "--max-num-seqs", "--max-num-batched-tokens",
                     "--kv-cache-tokens"};
  spec.switches = {"--no-prefix-caching", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-i", "--input"}, {"-o", "--output"}, {"-t", "--threads"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kGenerateUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kGenerateUsage, stdout);
    return 0;
  }
  if (!args.has("--input")) return fail(std::string("--input is required\n") + kGenerateUsage, 2);
  auto threads = args.get_int("--threads", 0);
  auto seqs = args.get_int("--max-num-seqs", 64);
  auto batched = args.get_int("--max-num-batched-tokens", 2048);
  auto kv_tokens = args.get_int("--kv-cache-tokens", 0);
  for (const Status& s : {threads.status(), seqs.status(), batched.status(), kv_tokens.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }

  auto path = resolve_model_path(args.get("--model").value_or(std::string(kDefaultModelName)));
  if (!path.ok()) return fail(path.status().message());
  std::unique_ptr<Tokenizer> tokenizer;
  {
    auto source = open_tensor_source(*path);
    if (!source.ok()) return fail(source.status().message());
    if ((*source)->metadata().has("tokenizer.ggml.tokens")) {
      auto tok = Tokenizer::from_metadata((*source)->metadata());
      if (!tok.ok()) return fail(*path + ": " + tok.status().message());
      tokenizer = std::move(tok).value();
    }
  }

  std::vector<int32_t> end_of_generation;  // the same for every request: found once
  if (tokenizer) {
    for (int32_t id = 0; id < tokenizer->n_vocab(); ++id) {
      if (tokenizer->is_end_of_generation(id)) end_of_generation.push_back(id);
    }
  }

  std::ifstream in(*args.get("--input"));
  if (!in) return fail("cannot read input file '" + *args.get("--input") + "'");
  std::vector<GenerationRequest> requests;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("input line " + std::to_string(n) + " is not valid JSON", 2);
    auto r = parse_request(j, tokenizer.get(), end_of_generation, n);
    if (!r.ok()) return fail(r.status().message(), 2);
    requests.push_back(std::move(r).value());
  }
  if (requests.empty()) return fail("the input file holds no requests", 2);

  EngineConfig config;
  config.model_path = *path;
  config.threads = static_cast<int32_t>(*threads);
  config.max_num_seqs = static_cast<int32_t>(*seqs);
  config.max_num_batched_tokens = *batched;
  config.kv_cache_tokens = *kv_tokens;
  config.enable_prefix_caching = !args.has("--no-prefix-caching");
  auto engine = Engine::create(config);
  if (!engine.ok()) return fail(engine.status().message());

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto h = (*engine)->submit(requests[i]);
    if (!h.ok()) return fail("request " + std::to_string(i + 1) + ": " + h.status().message(), 2);
    handles.push_back(std::move(h).value());
  }
  std::ofstream out_file;
  if (args.has("--output")) {
    out_file.open(*args.get("--output"));
    if (!out_file) return fail("cannot write output file '" + *args.get("--output") + "'");
  }
  std::ostream& out = args.has("--output") ? out_file : std::cout;
  int64_t n_generated = 0, n_prompt = 0, n_cached = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    std::vector<int32_t> ids;
    FinishReason reason = FinishReason::kNone;
    int64_t cached = 0;
    while (auto e = handles[i]->next()) {
      ids.insert(ids.end(), e->tokens.begin(), e->tokens.end());
      reason = e->finish;
      cached = e->n_cached_prompt_tokens;
    }
    n_generated += static_cast<int64_t>(ids.size());
    n_prompt += static_cast<int64_t>(requests[i].prompt.size());
    n_cached += cached;
    nlohmann::json r;
    r["index"] = i;
    r["prompt_tokens"] = requests[i].prompt.size();
    r["cached_prompt_tokens"] = cached;
    r["generated_token_ids"] = ids;
    if (tokenizer) r["text"] = tokenizer->decode(ids);
    r["finish_reason"] = finish_name(reason);
    out << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineStats s = (*engine)->stats();
  const double step_total = s.forward_seconds + s.overhead_seconds;
  std::fprintf(stderr,
               "%zu requests: %lld prompt tokens (%lld from the prefix cache), %lld generated in %.2f s: "
               "%.1f generated tokens/s; %lld steps, engine overhead %.1f%% of step time, %lld preemptions\n",
               requests.size(), static_cast<long long>(n_prompt), static_cast<long long>(n_cached),
               static_cast<long long>(n_generated), seconds, n_generated / seconds, static_cast<long long>(s.n_steps),
               step_total > 0 ? 100.0 * s.overhead_seconds / step_total : 0.0, static_cast<long long>(s.n_preemptions));
  return 0;
}

}  // namespace deepinfer::cli
