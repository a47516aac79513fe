// deepinfer generate: offline batch inference through the engine. JSONL requests in, JSONL
// results out (in input order), a progress bar and the throughput on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/loading.h"
#include "deepinfer/engine.h"
#include "model/catalog.h"
#include "model/loader/tensor_source.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

namespace {

using Clock = std::chrono::steady_clock;

const char* kGenerateUsage = R"(usage: deepinfer generate [-m MODEL] --input FILE [--output FILE] [options]
  Each input line is a JSON object with "prompt" (text), "prompt_token_ids" ([ids]) or "messages"
  ([{"role": "system"|"user", "content": "..."}], one user turn, the model's chat format), and
  optional parameters: "max_tokens" (16), "n" (1), "temperature" (1.0), "top_p", "top_k",
  "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias"
  ({"id": bias}), "seed", "stop" (string or list), "stop_token_ids", "include_stop_str_in_output",
  "min_tokens", "ignore_eos", "logprobs" (true or a count of top tokens), "top_logprobs",
  "prompt_logprobs" (a count), "cache_salt", "priority". All requests run concurrently through
  the engine; results are written one JSON object per line, in input order.
  --output FILE              results (default: stdout)
  --threads N                CPU threads (default: all cores)
  --max-num-seqs N           requests decoded together (default 64)
  --max-num-batched-tokens N tokens per engine step (default 2048)
  --kv-cache-tokens N        KV capacity in tokens (default: 16 contexts or 1 GiB)
  --no-prefix-caching        turn the prefix cache off
  --batch-invariant          outputs do not depend on the batch (with "seed": reproducible)
  --no-async-scheduling      do the engine's bookkeeping between steps, not during them
  --no-swa-replay            sliding-window models (Gemma 3) take no prefix hit: cold recompute
  --kv-cache-dtype T         KV cache elements: f16 (default, half the memory) or f32
)";

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

Result<std::vector<int32_t>> render_messages(const nlohmann::json& messages, const Tokenizer& tokenizer,
                                             const std::string& where) {
  if (!messages.is_array() || messages.empty()) return invalid_argument(where + "\"messages\" must be a non-empty array");
  std::string system, user;
  bool has_user = false;
  for (const nlohmann::json& m : messages) {
    const std::string role = m.at("role").get<std::string>();
    const std::string content = m.at("content").get<std::string>();
    if (role == "system" && !has_user && system.empty()) {
      system = content;
    } else if (role == "user" && !has_user) {
      user = content;
      has_user = true;
    } else {
      return invalid_argument(where + "generate renders one optional system message and one user message; got a '" +
                              role + "' message in another place (use the server for conversations)");
    }
  }
  if (!has_user) return invalid_argument(where + "\"messages\" holds no user message");
  return render_chat_prompt(tokenizer, system, user);
}

Status parse_sampling(const nlohmann::json& j, GenerationRequest* r) {
  SamplingParams& s = r->sampling;
  s.temperature = j.value("temperature", 1.0f);
  s.top_p = j.value("top_p", 1.0f);
  s.top_k = j.value("top_k", 0);
  s.min_p = j.value("min_p", 0.0f);
  s.presence_penalty = j.value("presence_penalty", 0.0f);
  s.frequency_penalty = j.value("frequency_penalty", 0.0f);
  s.repetition_penalty = j.value("repetition_penalty", 1.0f);
  if (j.contains("logit_bias")) {
    for (const auto& [key, bias] : j.at("logit_bias").items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id > INT32_MAX) {
        return invalid_argument("logit_bias key '" + key + "' is not a token id");
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), bias.get<float>());
    }
  }
  if (j.contains("seed") && !j.at("seed").is_null()) s.seed = j.at("seed").get<uint64_t>();
  s.min_tokens = j.value("min_tokens", int64_t{0});
  s.ignore_eos = j.value("ignore_eos", false);
  // OpenAI chat style ("logprobs": true, "top_logprobs": k) or completions style ("logprobs": k).
  if (j.contains("logprobs") && !j.at("logprobs").is_null()) {
    const nlohmann::json& lp = j.at("logprobs");
    if (lp.is_boolean()) {
      s.logprobs = lp.get<bool>() ? j.value("top_logprobs", 0) : -1;
    } else {
      s.logprobs = lp.get<int32_t>();
    }
  }
  if (j.contains("prompt_logprobs") && !j.at("prompt_logprobs").is_null()) {
    s.prompt_logprobs = j.at("prompt_logprobs").get<int32_t>();
  }
  return {};
}

Result<GenerationRequest> parse_request(const nlohmann::json& j, const Tokenizer* tokenizer, size_t line) {
  const std::string where = "input line " + std::to_string(line) + ": ";
  if (!j.is_object()) return invalid_argument(where + "expected a JSON object");
  GenerationRequest r;
  try {
    if (j.contains("prompt_token_ids")) {
      r.prompt = j.at("prompt_token_ids").get<std::vector<int32_t>>();
    } else if (j.contains("prompt") || j.contains("messages")) {
      if (!tokenizer) return invalid_argument(where + "the model has no tokenizer; give prompt_token_ids");
      if (j.contains("messages")) {
        DI_ASSIGN_OR_RETURN(r.prompt, render_messages(j.at("messages"), *tokenizer, where));
      } else {
        EncodeOptions options;
        options.add_bos = tokenizer->add_bos_by_default();
        r.prompt = tokenizer->encode(j.at("prompt").get<std::string>(), options);
      }
    } else {
      return invalid_argument(where + "needs \"prompt\", \"prompt_token_ids\" or \"messages\"");
    }
    r.max_tokens = j.value("max_tokens", int64_t{16});
    r.n = j.value("n", 1);
    Status s = parse_sampling(j, &r);
    if (!s.ok()) return invalid_argument(where + s.message());
    if (j.contains("stop") && !j.at("stop").is_null()) {
      const nlohmann::json& stop = j.at("stop");
      r.stop = stop.is_string() ? std::vector<std::string>{stop.get<std::string>()} : stop.get<std::vector<std::string>>();
    }
    r.stop_token_ids = j.value("stop_token_ids", std::vector<int32_t>{});
    r.include_stop_str_in_output = j.value("include_stop_str_in_output", false);
    r.cache_salt = j.value("cache_salt", std::string());
    r.priority = j.value("priority", 0);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(where + "a field is missing or has the wrong type (" + e.what() + ")");
  }
  return r;
}

nlohmann::json logprob_json(const TokenLogprob& lp) {
  nlohmann::json top = nlohmann::json::array();
  for (const TopLogprob& t : lp.top) top.push_back({{"token", t.token}, {"logprob", t.logprob}});
  return {{"token", lp.token}, {"logprob", lp.logprob}, {"rank", lp.rank}, {"top_logprobs", top}};
}

// One sequence's output, gathered from its events.
struct SequenceOutput {
  std::vector<int32_t> ids;
  std::string text;
  nlohmann::json logprobs = nlohmann::json::array();
  TokenEvent first, last;
  bool seen = false;

  nlohmann::json stop_reason() const {
    if (last.finish != FinishReason::kStop) return nullptr;
    if (!last.stop_string.empty()) return last.stop_string;
    if (last.stop_token >= 0) return last.stop_token;
    return nullptr;
  }
};

// Shows requests done and the engine's generation speed, on a terminal only.
class Progress {
 public:
  Progress(size_t total, const Engine& engine) : total_(total), engine_(engine), on_(isatty(STDERR_FILENO) != 0) {}
  void show(size_t done) {
    if (!on_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const int64_t tokens = engine_.stats().generation_tokens;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<size_t>(1, total_));
    std::fprintf(stderr, "\r[%s%s] %zu/%zu requests, %lld tokens, %.1f tokens/s ", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), done, total_, static_cast<long long>(tokens),
                 seconds > 0 ? tokens / seconds : 0.0);
    if (done == total_) std::fputc('\n', stderr);
  }

 private:
  size_t total_;
  const Engine& engine_;
  bool on_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
};

}  // namespace

int generate_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--input", "--output", "--threads", "--max-num-seqs", "--max-num-batched-tokens",
                     "--kv-cache-tokens", "--kv-cache-dtype"};
  spec.switches = {"--no-prefix-caching", "--batch-invariant", "--no-async-scheduling", "--no-swa-replay", "--help"};
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
  auto kv_dtype = parse_kv_cache_dtype(args.get("--kv-cache-dtype"));
  for (const Status& s : {threads.status(), seqs.status(), batched.status(), kv_tokens.status(), kv_dtype.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }

  auto path = resolve_model_path(args.get("--model").value_or(std::string(kDefaultModelName)));
  if (!path.ok()) return fail(path.status().message());
  // The prompt side of the tokenizer (the engine has its own for the text of the outputs).
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

  std::ifstream in(*args.get("--input"));
  if (!in) return fail("cannot read input file '" + *args.get("--input") + "'");
  std::vector<GenerationRequest> requests;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("input line " + std::to_string(n) + " is not valid JSON", 2);
    auto r = parse_request(j, tokenizer.get(), n);
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
  config.kv_cache_dtype = *kv_dtype;
  config.enable_prefix_caching = !args.has("--no-prefix-caching");
  config.batch_invariant = args.has("--batch-invariant");
  config.async_scheduling = !args.has("--no-async-scheduling");
  config.swa_replay = !args.has("--no-swa-replay");
  auto engine = Engine::create(config);
  if (!engine.ok()) return fail(engine.status().message());

  const auto start = Clock::now();
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
  Progress progress(requests.size(), **engine);
  int64_t n_generated = 0, n_prompt = 0, n_cached = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const GenerationRequest& req = requests[i];
    std::vector<SequenceOutput> seqs(static_cast<size_t>(req.n));
    TokenEvent e;
    for (WaitStatus w; (w = handles[i]->next_for(std::chrono::milliseconds(200), &e)) != WaitStatus::kEnd;) {
      progress.show(i);
      if (w != WaitStatus::kEvent) continue;
      SequenceOutput& s = seqs[static_cast<size_t>(e.index)];
      s.ids.insert(s.ids.end(), e.tokens.begin(), e.tokens.end());
      s.text += e.text;
      for (const TokenLogprob& lp : e.logprobs) s.logprobs.push_back(logprob_json(lp));
      if (!s.seen) s.first = e;
      s.seen = true;
      s.last = std::move(e);
    }
    int64_t completion_tokens = 0;
    nlohmann::json outputs = nlohmann::json::array();
    for (size_t k = 0; k < seqs.size(); ++k) {
      const SequenceOutput& s = seqs[k];
      completion_tokens += static_cast<int64_t>(s.ids.size());
      nlohmann::json o;
      o["index"] = k;
      o["text"] = s.text;
      o["token_ids"] = s.ids;
      o["finish_reason"] = finish_name(s.last.finish);
      o["stop_reason"] = s.stop_reason();
      if (s.last.finish == FinishReason::kError) o["error"] = s.last.error;
      if (req.sampling.logprobs >= 0) o["logprobs"] = s.logprobs;
      outputs.push_back(std::move(o));
    }
    const SequenceOutput& s0 = seqs[0];
    const int64_t cached = s0.first.n_cached_prompt_tokens;
    n_generated += completion_tokens;
    n_prompt += static_cast<int64_t>(req.prompt.size());
    n_cached += cached;
    nlohmann::json r;
    r["index"] = i;
    r["prompt_tokens"] = req.prompt.size();
    r["cached_prompt_tokens"] = cached;
    // The first output's fields at the top level; every output (n > 1) under "outputs".
    r["generated_token_ids"] = s0.ids;
    if (tokenizer) r["text"] = s0.text;
    r["finish_reason"] = outputs[0]["finish_reason"];
    r["stop_reason"] = outputs[0]["stop_reason"];
    if (outputs[0].contains("error")) r["error"] = outputs[0]["error"];
    if (req.sampling.logprobs >= 0) r["logprobs"] = s0.logprobs;
    if (req.n > 1) r["outputs"] = outputs;
    if (req.sampling.prompt_logprobs >= 0) {
      nlohmann::json pl = nlohmann::json::array();
      for (const auto& p : s0.first.prompt_logprobs) pl.push_back(p ? logprob_json(*p) : nlohmann::json(nullptr));
      r["prompt_logprobs"] = pl;
    }
    // Seconds from submission: first scheduled, first token (TTFT); queue time is part of both.
    r["metrics"] = {{"queue_seconds", s0.first.queue_seconds}, {"first_token_seconds", s0.first.first_token_seconds}};
    r["usage"] = {{"prompt_tokens", req.prompt.size()},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", static_cast<int64_t>(req.prompt.size()) + completion_tokens}};
    out << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  progress.show(requests.size());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const EngineStats s = (*engine)->stats();
  const double step_total = s.forward_seconds + s.overhead_seconds;
  std::fprintf(stderr,
               "%zu requests: %lld prompt tokens (%lld from the prefix cache), %lld generated in %.2f s: "
               "%.1f generated tokens/s; %lld steps, engine overhead %.1f%% of step time, %lld preemptions\n",
               requests.size(), static_cast<long long>(n_prompt), static_cast<long long>(n_cached),
               static_cast<long long>(n_generated), seconds, n_generated / seconds, static_cast<long long>(s.n_steps),
               step_total > 0 ? 100.0 * s.overhead_seconds / step_total : 0.0, static_cast<long long>(s.n_preemptions));
  if (s.decode_steps > 0 && s.decode_step_seconds > 0) {
    std::fprintf(stderr, "decode-only steps: %lld, %lld tokens in %.2f s: %.1f tokens/s, %.1f sequences per step\n",
                 static_cast<long long>(s.decode_steps), static_cast<long long>(s.decode_step_tokens),
                 s.decode_step_seconds, s.decode_step_tokens / s.decode_step_seconds,
                 static_cast<double>(s.decode_step_tokens) / static_cast<double>(s.decode_steps));
  }
  return 0;
}

}  // namespace deepinfer::cli
