#include "server/api_common.h"

#include "recipe/request_fields.h"

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

namespace {

// Chat Completions' logprobs (a boolean) and top_logprobs (how many alternatives), or
// Completions' logprobs (the count itself).
Result<int32_t> read_logprobs(const recipe::FieldReader& f, SamplingFields fields) {
  if (fields == SamplingFields::kCompletions) {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> k, f.integer({"logprobs", 0, 20}));
    return k ? static_cast<int32_t>(*k) : -1;
  }
  if (fields != SamplingFields::kChat) return -1;
  DI_ASSIGN_OR_RETURN(std::optional<bool> want, f.boolean("logprobs"));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> top, f.integer(recipe::kTopLogprobsSpec));
  if (top && !want.value_or(false)) return bad("top_logprobs requires logprobs to be true");
  if (!want.value_or(false)) return -1;
  return static_cast<int32_t>(top.value_or(0));
}

// A logit_bias key is a token id written as a canonical decimal integer: "42", never "042",
// "+42", "4.0" or " 42", and within int32 (a larger id is rejected here, not truncated onto
// another token; the engine checks it against the vocabulary).
std::optional<int32_t> token_id_key(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(id);
}

Result<std::vector<std::pair<int32_t, float>>> read_logit_bias(const recipe::FieldReader& f) {
  std::vector<std::pair<int32_t, float>> bias;
  DI_ASSIGN_OR_RETURN(const Json* map, f.object("logit_bias"));
  if (map == nullptr) return bias;
  for (const auto& [key, value] : map->items()) {
    const std::string path = "logit_bias." + key;
    std::optional<int32_t> id = token_id_key(key);
    if (!id) {
      return bad("Invalid 'logit_bias': the key \"" + key +
                 "\" is not a token id (a decimal integer in [0, 2147483647] without sign or leading zeros).");
    }
    DI_ASSIGN_OR_RETURN(double b, recipe::number_value(value, path, {-100, 100}));
    bias.emplace_back(*id, static_cast<float>(b));
  }
  return bias;
}

}  // namespace

Result<SamplingExtras> read_sampling_extras(const Json& body, SamplingFields fields) {
  SamplingExtras x;
  const recipe::FieldReader f(body);
  if (fields != SamplingFields::kConversation) {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> n, f.integer({"n", 1, 16}));
    x.n = static_cast<int32_t>(n.value_or(1));
  }
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> seed, f.integer(recipe::kSeedSpec));
  if (seed) x.seed = static_cast<uint64_t>(*seed);
  DI_ASSIGN_OR_RETURN(x.logprobs, read_logprobs(f, fields));
  // -1 and 0 both mean no limit, as in vLLM; any larger count beyond the vocabulary is no limit either.
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.integer({"top_k", -1, INT32_MAX}));
  x.top_k = static_cast<int32_t>(top_k.value_or(0));
  DI_ASSIGN_OR_RETURN(std::optional<double> min_p, f.number({"min_p", {0, 1}}));
  DI_ASSIGN_OR_RETURN(std::optional<double> presence, f.number(recipe::kPresencePenaltySpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> frequency, f.number(recipe::kFrequencyPenaltySpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> repetition, f.number({"repetition_penalty", {0, 100, true}}));
  x.min_p = static_cast<float>(min_p.value_or(0.0));
  x.presence_penalty = static_cast<float>(presence.value_or(0.0));
  x.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  x.repetition_penalty = static_cast<float>(repetition.value_or(1.0));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, f.integer({"min_tokens", 0, INT64_MAX}));
  x.min_tokens = min_tokens.value_or(0);
  DI_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, f.boolean("ignore_eos"));
  x.ignore_eos = ignore_eos.value_or(false);
  DI_ASSIGN_OR_RETURN(x.logit_bias, read_logit_bias(f));
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
    : prefix_(prompt.output_prefix), closing_(prompt.output_closing) {}

std::string OutputShaper::shape(std::string_view text) {
  if (done_) return "";
  std::string out = std::move(prefix_);
  prefix_.clear();
  if (closing_.empty()) {
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
      out += closing_;
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
    // In uint64: max_tokens (at most 2^63 - 1) plus any prompt cannot wrap.
    const uint64_t requested = static_cast<uint64_t>(max_tokens) + n_prompt;
    error.message = "This model's maximum context length is " + std::to_string(engine.max_context()) +
                    " tokens. However, you requested " + std::to_string(requested) + " tokens (" +
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
