// deepinfer generate: offline batch inference through the engine. JSONL requests in, JSONL
// results out (in input order), a progress bar and the throughput on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loading.h"
#include "deepinfer/engine.h"
#include "engine/create_engine.h"
#include "tokenizer/tokenizer.h"
#include "recipe/request_fields.h"
#include "server/structured_fields.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::cli {

namespace {

using Clock = std::chrono::steady_clock;

const char* kGenerateUsage = R"(usage: deepinfer generate [-m MODEL] --input FILE [--output FILE] [options]
  Each input line is a JSON object with "prompt" (text), "prompt_token_ids" ([ids]) or "messages"
  ([{"role": "system"|"user"|"assistant", "content": "..."}], ending with a user turn, rendered
  in the model's chat format), and optional parameters: "max_tokens" (16), "n" (1),
  "temperature" (1.0), "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
  "repetition_penalty", "logit_bias" ({"id": bias}), "seed", "stop" (string or list),
  "stop_token_ids", "include_stop_str_in_output", "min_tokens", "ignore_eos", "logprobs" (true or
  a count of top tokens), "top_logprobs", "prompt_logprobs" (a count), "cache_salt", "priority",
  with the server's types and ranges (a bad value stops with an error naming the field).
  All requests run concurrently through the engine; results are written one JSON object per
  line, in input order.
  --output FILE              results (default: stdout)
)";

std::string usage() { return kGenerateUsage + engine_flags_usage(); }

using Json = nlohmann::ordered_json;

Result<std::vector<int32_t>> render_messages(const Json& messages, const ChatRenderer& renderer,
                                             const std::string& where) {
  if (!messages.is_array() || messages.empty()) return invalid_argument(where + "\"messages\" must be a non-empty array");
  std::vector<recipe::Message> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const recipe::FieldReader m(messages[i], "messages[" + std::to_string(i) + "]");
    DI_ASSIGN_OR_RETURN(std::optional<std::string> role, m.string("role"));
    DI_ASSIGN_OR_RETURN(std::optional<std::string> content, m.string("content"));
    if (!role || !content) return invalid_argument(where + m.path("role") + " and .content must be strings");
    if (*role == "system") {
      turns.push_back(recipe::Message::system(std::move(*content)));
    } else if (*role == "user") {
      turns.push_back(recipe::Message::user(std::move(*content)));
    } else if (*role == "assistant") {
      turns.push_back(recipe::Message::assistant(std::move(*content)));
    } else {
      return invalid_argument(where + "generate renders system, user and assistant messages; got a '" + *role +
                              "' message (use the server for tools)");
    }
  }
  auto ids = renderer.render(turns);
  if (!ids.ok()) return invalid_argument(where + ids.status().message());
  return ids;
}

// An array of integers in [lo, hi], or nullopt when absent.
Result<std::optional<std::vector<int32_t>>> int_list(const recipe::FieldReader& f, std::string_view key, int64_t lo,
                                                     int64_t hi) {
  DI_ASSIGN_OR_RETURN(const Json* list, f.array(key));
  if (!list) return std::optional<std::vector<int32_t>>();
  std::vector<int32_t> out;
  for (size_t i = 0; i < list->size(); ++i) {
    DI_ASSIGN_OR_RETURN(int64_t v, recipe::integer_value((*list)[i], f.path(key) + "[" + std::to_string(i) + "]", lo, hi));
    out.push_back(static_cast<int32_t>(v));
  }
  return std::optional<std::vector<int32_t>>(std::move(out));
}

// The same fields, types and ranges as the server's (docs/server.md, "Request fields").
Status parse_sampling(const recipe::FieldReader& f, GenerationRequest* r) {
  SamplingParams& s = r->sampling;
  DI_ASSIGN_OR_RETURN(std::optional<double> temperature, f.number(recipe::kTemperatureSpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> top_p, f.number(recipe::kTopPSpec));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.integer({"top_k", -1, INT32_MAX}));
  DI_ASSIGN_OR_RETURN(std::optional<double> min_p, f.number({"min_p", {0, 1}}));
  DI_ASSIGN_OR_RETURN(std::optional<double> presence, f.number(recipe::kPresencePenaltySpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> frequency, f.number(recipe::kFrequencyPenaltySpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> repetition, f.number({"repetition_penalty", {0, 100, true}}));
  s.temperature = static_cast<float>(temperature.value_or(1.0));
  s.top_p = static_cast<float>(top_p.value_or(1.0));
  s.top_k = static_cast<int32_t>(top_k.value_or(0));
  s.min_p = static_cast<float>(min_p.value_or(0.0));
  s.presence_penalty = static_cast<float>(presence.value_or(0.0));
  s.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  s.repetition_penalty = static_cast<float>(repetition.value_or(1.0));
  DI_ASSIGN_OR_RETURN(const Json* bias, f.object("logit_bias"));
  if (bias) {
    for (const auto& item : bias->items()) {
      const std::string& key = item.key();
      const bool canonical = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), ::isdigit) &&
                             (key == "0" || key[0] != '0') && std::stoll(key) <= INT32_MAX;
      if (!canonical) return invalid_argument("logit_bias key '" + key + "' is not a token id");
      DI_ASSIGN_OR_RETURN(double b, recipe::number_value(item.value(), "logit_bias." + key, {-100, 100}));
      s.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), static_cast<float>(b));
    }
  }
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> seed, f.integer(recipe::kSeedSpec));
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, f.integer({"min_tokens", 0, INT64_MAX}));
  s.min_tokens = min_tokens.value_or(0);
  DI_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, f.boolean("ignore_eos"));
  s.ignore_eos = ignore_eos.value_or(false);
  // OpenAI chat style ("logprobs": true, "top_logprobs": k) or completions style ("logprobs": k).
  if (const Json* lp = f.find("logprobs"); lp && lp->is_boolean()) {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> top, f.integer(recipe::kTopLogprobsSpec));
    s.logprobs = lp->get<bool>() ? static_cast<int32_t>(top.value_or(0)) : -1;
  } else {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> count, f.integer({"logprobs", 0, 20}));
    if (count) s.logprobs = static_cast<int32_t>(*count);
  }
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> prompt_logprobs, f.integer({"prompt_logprobs", 0, 20}));
  if (prompt_logprobs) s.prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
  return {};
}

Status parse_stops(const recipe::FieldReader& f, GenerationRequest& r) {
  if (const Json* stop = f.find("stop"); stop && stop->is_string()) {
    r.stop = {stop->get<std::string>()};
  } else if (stop) {
    DI_ASSIGN_OR_RETURN(const Json* list, f.array("stop"));
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) return recipe::type_error("stop[" + std::to_string(i) + "]", "a string", (*list)[i]);
      r.stop.push_back((*list)[i].get<std::string>());
    }
  }
  DI_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> stop_ids, int_list(f, "stop_token_ids", 0, INT32_MAX));
  r.stop_token_ids = stop_ids.value_or(std::vector<int32_t>{});
  DI_ASSIGN_OR_RETURN(std::optional<bool> include, f.boolean("include_stop_str_in_output"));
  r.include_stop_str_in_output = include.value_or(false);
  return {};
}

// `renderer` null: the model has no tokenizer, so no chat rendering either.
Result<GenerationRequest> parse_request(const Json& j, const Tokenizer* tokenizer, const ChatRenderer* renderer,
                                        size_t line) {
  const std::string where = "input line " + std::to_string(line) + ": ";
  if (!j.is_object()) return invalid_argument(where + "expected a JSON object");
  auto fields = [&]() -> Result<GenerationRequest> {
    const recipe::FieldReader f(j);
    GenerationRequest r;
    DI_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> ids, int_list(f, "prompt_token_ids", INT32_MIN, INT32_MAX));
    DI_ASSIGN_OR_RETURN(std::optional<std::string> prompt, f.string("prompt"));
    if (ids) {
      r.prompt = std::move(*ids);  // the engine checks them against the vocabulary
    } else if (prompt || f.has("messages")) {
      if (!tokenizer) return invalid_argument("the model has no tokenizer; give prompt_token_ids");
      if (f.has("messages")) {
        DI_ASSIGN_OR_RETURN(r.prompt, render_messages(*f.find("messages"), *renderer, ""));
      } else {
        EncodeOptions options;
        options.add_bos = tokenizer->add_bos_by_default();
        r.prompt = tokenizer->encode(*prompt, options);
      }
    } else {
      return invalid_argument("needs \"prompt\", \"prompt_token_ids\" or \"messages\"");
    }
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, f.integer({"max_tokens", 1, INT64_MAX}));
    r.max_tokens = max_tokens.value_or(16);
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> n, f.integer({"n", 1, 128}));
    r.n = static_cast<int32_t>(n.value_or(1));
    DI_RETURN_IF_ERROR(parse_sampling(f, &r));
    DI_RETURN_IF_ERROR(parse_stops(f, r));
    // Structured output as /v1/completions reads it (response_format, structured_outputs, ...).
    DI_ASSIGN_OR_RETURN(server::StructuredField structured, server::read_structured_field(j, /*with_response_format=*/true));
    r.sampling.constraint = std::move(structured.constraint);
    DI_ASSIGN_OR_RETURN(r.cache_salt, f.string_or("cache_salt", ""));
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> priority, f.integer({"priority", INT32_MIN, INT32_MAX}));
    r.priority = static_cast<int32_t>(priority.value_or(0));
    return r;
  };
  auto r = fields();
  if (!r.ok()) return invalid_argument(where + r.status().message());
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
  spec.takes_positional = false;
  spec.with_value = {"--input", "--output"};
  spec.switches = {"--help"};
  spec.aliases = {{"-i", "--input"}, {"-o", "--output"}, {"-h", "--help"}};
  add_engine_flags(spec);
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (!args.has("--input")) return fail("--input is required\n" + usage(), 2);
  auto config = parse_engine_flags(args);
  if (!config.ok()) return fail(config.status().message(), 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail(path.status().message());
  config->model_path = *path;

  std::ifstream in(*args.get("--input"));
  if (!in) return fail("cannot read input file '" + *args.get("--input") + "'");
  // The tokenizer (for the prompts, and the engine's text) before the requests are read; the
  // weights load once they all parsed.
  auto tokenizer = load_tokenizer(*path, TokenizerPresence::kOptional);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  std::optional<ChatRenderer> renderer;
  if (*tokenizer) renderer.emplace(*tokenizer, *path);
  std::vector<GenerationRequest> requests;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("input line " + std::to_string(n) + " is not valid JSON", 2);
    auto r = parse_request(j, tokenizer->get(), renderer ? &*renderer : nullptr, n);
    if (!r.ok()) return fail(r.status().message(), 2);
    requests.push_back(std::move(r).value());
  }
  if (requests.empty()) return fail("the input file holds no requests", 2);

  auto engine = create_engine(*config, *tokenizer);
  if (!engine.ok()) return fail(engine.status().message());

  const auto start = Clock::now();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto h = (*engine)->submit(requests[i]);
    if (!h.ok()) return fail("request " + std::to_string(i + 1) + ": " + h.status().message(), submit_exit_code(h.status()));
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
      o["finish_reason"] = finish_reason_name(s.last.finish);
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
    if (*tokenizer) r["text"] = s0.text;
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
    r["metrics"] = {{"queue_seconds", s0.first.queue_seconds},
                    {"first_token_seconds", s0.first.first_token_seconds},
                    {"finish_seconds", s0.last.finish_seconds}};
    if (s0.last.n_draft_tokens > 0) {
      r["speculative"] = {{"draft_tokens", s0.last.n_draft_tokens},
                          {"accepted_tokens", s0.last.n_accepted_draft_tokens}};
    }
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
  for (const SpeculativeMethodUsage& m : s.speculative.methods) {
    if (m.verifications == 0) continue;
    std::fprintf(stderr, "speculative (%s): %lld of %lld draft tokens accepted (%.1f%%), %.2f tokens per verification\n",
                 m.method.c_str(), static_cast<long long>(m.accepted_tokens), static_cast<long long>(m.draft_tokens),
                 100.0 * static_cast<double>(m.accepted_tokens) / static_cast<double>(m.draft_tokens),
                 m.mean_acceptance_length());
  }
  if (s.decode_steps > 0 && s.decode_step_seconds > 0) {
    std::fprintf(stderr, "decode-only steps: %lld, %lld tokens in %.2f s: %.1f tokens/s, %.1f tokens per step\n",
                 static_cast<long long>(s.decode_steps), static_cast<long long>(s.decode_step_tokens),
                 s.decode_step_seconds, s.decode_step_tokens / s.decode_step_seconds,
                 static_cast<double>(s.decode_step_tokens) / static_cast<double>(s.decode_steps));
  }
  return 0;
}

}  // namespace deepinfer::cli
