#include "server/api_common.h"

#include <cmath>
#include <random>

namespace deepinfer::server {

namespace {

constexpr int kMaxJsonDepth = 128;

// Nesting depth of a JSON text, strings skipped. Checked before parsing so that a hostile
// body of a million brackets costs one scan, not a million nested values.
int json_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

bool is_json_content_type(std::string_view type) {
  return type.empty() || type.find("json") != std::string_view::npos;
}

Status bad(const std::string& message) { return invalid_argument(message); }

Result<double> number_field(const Json& body, const char* key, double fallback, double lo, double hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number()) return bad(std::string(key) + " must be a number");
  const double v = body[key].get<double>();
  if (!(v >= lo && v <= hi)) {
    return bad("Invalid " + std::string(key) + " value " + std::to_string(v) + ": the valid range is [" +
               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

void send_json(ResponseWriter& out, int status, const std::string& body, const Headers& extra) {
  out.send(status, "application/json", body, extra);
}

void send_error(ResponseWriter& out, ApiFlavor flavor, const ApiError& error, const Headers& extra) {
  send_json(out, error.status, error_json(flavor, error), extra);
}

Result<Json> parse_json_body(const HttpRequest& request) {
  const std::string* type = request.header("content-type");
  if (type != nullptr && !is_json_content_type(*type)) {
    return Status(StatusCode::kUnimplemented, "Content-Type must be application/json, not " + *type);
  }
  if (json_depth(request.body) > kMaxJsonDepth) {
    return bad("the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return bad("the request body is not valid JSON (truncated, malformed, or with invalid UTF-8 in a string)");
  }
  if (!body.is_object()) return bad("the request body must be a JSON object");
  return body;
}

std::optional<Json> body_or_answer(const HttpRequest& request, ApiFlavor flavor, ResponseWriter& out) {
  auto body = parse_json_body(request);
  if (body.ok()) return std::move(body).value();
  const int status = body.status().code() == StatusCode::kUnimplemented ? 415 : 400;
  send_error(out, flavor, {status, body.status().message(), "", ""});
  return std::nullopt;
}

bool bool_field(const Json& body, const char* key, bool fallback) {
  if (!body.is_object()) return fallback;
  auto it = body.find(key);
  return it != body.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Result<SamplingExtras> read_sampling_extras(const Json& body, bool chat_logprobs) {
  SamplingExtras x;
  if (body.contains("n") && !body["n"].is_null()) {
    if (!body["n"].is_number_integer() || body["n"].get<int64_t>() < 1 || body["n"].get<int64_t>() > 16) {
      return bad("Invalid n value: n must be an integer in [1, 16]");
    }
    x.n = static_cast<int32_t>(body["n"].get<int64_t>());
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer() || body["seed"].get<int64_t>() < 0) {
      return bad("seed must be a non-negative integer");
    }
    x.seed = body["seed"].get<uint64_t>();
  }
  if (chat_logprobs) {
    const bool want = bool_field(body, "logprobs", false);
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
      if (!body["top_logprobs"].is_number_integer()) return bad("top_logprobs must be an integer");
      const int64_t k = body["top_logprobs"].get<int64_t>();
      if (k < 0 || k > 20) return bad("Invalid top_logprobs value, the valid range of top_logprobs is [0, 20].");
      if (!want) return bad("top_logprobs requires logprobs to be true");
      x.logprobs = static_cast<int32_t>(k);
    } else if (want) {
      x.logprobs = 0;
    }
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    if (!body["logprobs"].is_number_integer()) return bad("logprobs must be an integer");
    const int64_t k = body["logprobs"].get<int64_t>();
    if (k < 0 || k > 20) return bad("Invalid logprobs value, the valid range of logprobs is [0, 20].");
    x.logprobs = static_cast<int32_t>(k);
  }
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    if (!body["top_k"].is_number_integer()) return bad("top_k must be an integer");
    x.top_k = static_cast<int32_t>(std::max<int64_t>(-1, body["top_k"].get<int64_t>()));
  }
  DI_ASSIGN_OR_RETURN(double min_p, number_field(body, "min_p", 0.0, 0.0, 1.0));
  DI_ASSIGN_OR_RETURN(double presence, number_field(body, "presence_penalty", 0.0, -2.0, 2.0));
  DI_ASSIGN_OR_RETURN(double frequency, number_field(body, "frequency_penalty", 0.0, -2.0, 2.0));
  DI_ASSIGN_OR_RETURN(double repetition, number_field(body, "repetition_penalty", 1.0, 1e-6, 100.0));
  x.min_p = static_cast<float>(min_p);
  x.presence_penalty = static_cast<float>(presence);
  x.frequency_penalty = static_cast<float>(frequency);
  x.repetition_penalty = static_cast<float>(repetition);
  if (body.contains("min_tokens") && !body["min_tokens"].is_null()) {
    if (!body["min_tokens"].is_number_integer() || body["min_tokens"].get<int64_t>() < 0) {
      return bad("min_tokens must be a non-negative integer");
    }
    x.min_tokens = body["min_tokens"].get<int64_t>();
  }
  x.ignore_eos = bool_field(body, "ignore_eos", false);
  if (body.contains("logit_bias") && body["logit_bias"].is_object()) {
    for (const auto& [key, value] : body["logit_bias"].items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || !value.is_number()) {
        return bad("logit_bias keys must be token ids and values numbers; got \"" + key + "\"");
      }
      x.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  return x;
}

void apply_sampling(const SamplingExtras& x, std::optional<double> temperature, std::optional<double> top_p,
                    GenerationRequest& request) {
  SamplingParams& s = request.sampling;
  s.temperature = static_cast<float>(temperature.value_or(1.0));
  s.top_p = static_cast<float>(top_p.value_or(1.0));
  s.top_k = x.top_k;
  s.min_p = x.min_p;
  s.presence_penalty = x.presence_penalty;
  s.frequency_penalty = x.frequency_penalty;
  s.repetition_penalty = x.repetition_penalty;
  s.logit_bias = x.logit_bias;
  s.seed = x.seed;
  s.min_tokens = x.min_tokens;
  s.ignore_eos = x.ignore_eos;
  s.logprobs = x.logprobs;
  request.n = x.n;
}

recipe::BackendFinish backend_finish(FinishReason finish) {
  switch (finish) {
    case FinishReason::kStop: return recipe::BackendFinish::kStop;
    case FinishReason::kLength: return recipe::BackendFinish::kLength;
    default: return recipe::BackendFinish::kEndOfStream;
  }
}

std::string random_id(const char* prefix) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Admission::Admission(std::atomic<int64_t>& in_flight, ApiMetrics& metrics, int64_t limit)
    : in_flight_(in_flight), metrics_(metrics) {
  const int64_t before = in_flight_.fetch_add(1);
  admitted_ = before < limit;
  if (!admitted_) {
    in_flight_.fetch_sub(1);
    metrics_.requests_rejected.inc();
    return;
  }
  metrics_.requests_in_flight.set(static_cast<double>(before + 1));
}

Admission::~Admission() {
  if (admitted_) metrics_.requests_in_flight.set(static_cast<double>(in_flight_.fetch_sub(1) - 1));
}

void send_overloaded(ResponseWriter& out, ApiFlavor flavor) {
  send_error(out, flavor, {429, "The server is overloaded: too many requests are waiting. Retry later.", "", ""},
             {{"Retry-After", "1"}});
}

PumpOutcome pump_events(RequestHandle& handle, ResponseWriter& out, std::chrono::milliseconds poll,
                        RequestTimer& timer, const std::function<bool(const TokenEvent&)>& on_event,
                        std::string* failure) {
  std::vector<bool> seen;  // per index: its first event arrived
  TokenEvent event;
  for (;;) {
    if (out.client_gone()) {
      handle.cancel();
      return PumpOutcome::kClientGone;
    }
    const WaitStatus status = handle.next_for(poll, &event);
    if (status == WaitStatus::kEnd) break;
    if (status == WaitStatus::kTimeout) continue;
    if (event.finish == FinishReason::kError) {
      handle.cancel();
      *failure = event.error;
      return PumpOutcome::kFailed;
    }
    const size_t index = static_cast<size_t>(event.index);
    if (index >= seen.size()) seen.resize(index + 1, false);
    timer.on_event(event.tokens.size(), !seen[index], event.queue_seconds);
    seen[index] = true;
    bool written = false;
    try {
      written = on_event(event);
    } catch (...) {
      handle.cancel();  // the engine must not keep generating for an answer that failed
      throw;
    }
    if (!written) {
      handle.cancel();
      return PumpOutcome::kClientGone;
    }
  }
  timer.on_end();
  return PumpOutcome::kDone;
}

void answer_engine_failure(ResponseWriter& out, ApiFlavor flavor, bool streaming, SseEvents events,
                           const std::string& message) {
  const ApiError error{500, message, "", ""};
  if (!streaming) return send_error(out, flavor, error);
  if (events == SseEvents::kNamed) {
    out.write("event: error\ndata: " + error_json(flavor, error) + "\n\n");
  } else {
    out.write(sse_data(error_json(flavor, error)));
  }
  out.finish();
}

namespace {

Json bytes_of(const std::string& piece) {
  Json bytes = Json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

void append_chat_logprobs(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& logprobs, Json& content) {
  for (const TokenLogprob& lp : logprobs) {
    const std::string piece = tokenizer.token_piece(lp.token);
    Json entry;
    entry["token"] = piece;
    entry["logprob"] = lp.logprob;
    entry["bytes"] = bytes_of(piece);
    Json top = Json::array();
    for (const TopLogprob& t : lp.top) {
      const std::string p = tokenizer.token_piece(t.token);
      top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
}

OutputShaper::OutputShaper(const BuiltPrompt& prompt)
    : prefix_(prompt.output_prefix), watch_(prompt.opens_arguments), in_string_(prompt.prefix_in_string) {}

std::string OutputShaper::shape(std::string_view text) {
  if (done_) return "";
  std::string out = std::move(prefix_);
  prefix_.clear();
  if (!watch_) {
    out += text;
    return out;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string_) {
      if (escape_) escape_ = false;
      else if (c == '\\') escape_ = true;
      else if (c == '"') in_string_ = false;
      continue;
    }
    if (c == '"') in_string_ = true;
    else if (c == '{' || c == '[') ++depth_;
    else if ((c == '}' || c == ']') && --depth_ == 0) {
      out += text.substr(0, i + 1);
      out += "}\n</tool_call>";
      done_ = true;
      return out;
    }
  }
  out += text;
  return out;
}

std::shared_ptr<RequestHandle> submit_or_answer(Engine& engine, GenerationRequest request, ApiFlavor flavor,
                                                ResponseWriter& out) {
  const size_t n_prompt = request.prompt.size();
  const int64_t max_tokens = request.max_tokens;
  auto handle = engine.submit(std::move(request));
  if (handle.ok()) return std::move(handle).value();
  ApiError error = api_error_from(handle.status());
  if (handle.status().code() == StatusCode::kOutOfRange) {
    error.message = "This model's maximum context length is " + std::to_string(engine.max_context()) +
                    " tokens. However, you requested " + std::to_string(n_prompt + max_tokens) + " tokens (" +
                    std::to_string(n_prompt) + " in the messages, " + std::to_string(max_tokens) +
                    " in the completion). Please reduce the length of the messages or completion.";
  }
  send_error(out, flavor, error);
  return nullptr;
}

SingleSequenceOutput::SingleSequenceOutput(const BuiltPrompt& prompt, const recipe::ParsingOptions& parsing)
    : shaper_(prompt), parser_(parsing) {
  usage_.prompt_tokens = static_cast<int64_t>(prompt.ids.size());
}

std::vector<recipe::OutputEvent> SingleSequenceOutput::on_event(const TokenEvent& e, RequestHandle& handle) {
  if (ended()) return {};
  if (e.n_prompt_tokens > 0) {
    usage_.prompt_tokens = e.n_prompt_tokens;
    usage_.prompt_cache_hit_tokens = e.n_cached_prompt_tokens;
  }
  usage_.completion_tokens += static_cast<int64_t>(e.tokens.size());
  std::vector<recipe::OutputEvent> events = parser_.feed(shaper_.shape(e.text));
  FinishReason finish = e.finish;
  if (finish == FinishReason::kNone && (shaper_.done() || parser_.finished())) {
    finish = FinishReason::kStop;
    handle.cancel();
  }
  if (finish != FinishReason::kNone) {
    const std::vector<recipe::OutputEvent>& rest = parser_.finish();
    events.insert(events.end(), rest.begin(), rest.end());
    finish_ = finish;
    if (e.finish == FinishReason::kStop && !e.stop_string.empty()) stop_sequence_ = e.stop_string;
  }
  return events;
}

}  // namespace deepinfer::server
