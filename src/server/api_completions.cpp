// POST /v1/completions: raw text (or token ids) in, text out; no chat template, no recipe
// parsing. The response and chunk shapes are OpenAI's legacy Completions API.
#include "recipe/request_fields.h"
#include "server/api_common.h"
#include "server/api_server.h"
#include "server/structured_fields.h"

namespace deepinfer::server {

namespace {

using recipe::FieldReader;
using recipe::type_error;

// The prompt as ids: a string, an array of token ids, or a one-element array of either.
Result<std::vector<int32_t>> read_prompt(const Json& body, const Tokenizer& tokenizer) {
  if (!body.contains("prompt")) return invalid_argument("\"prompt\" is required");
  const Json* prompt = &body["prompt"];
  std::string path = "prompt";
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    prompt = &(*prompt)[0];
    path = "prompt[0]";
  }
  if (prompt->is_string()) {
    EncodeOptions options;
    options.add_bos = tokenizer.add_bos_by_default();
    return tokenizer.encode(prompt->get<std::string>(), options);
  }
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_string() && !(*prompt)[0].is_array()) {
    std::vector<int32_t> ids;
    ids.reserve(prompt->size());
    for (size_t i = 0; i < prompt->size(); ++i) {
      DI_ASSIGN_OR_RETURN(int64_t id, recipe::integer_value((*prompt)[i], path + "[" + std::to_string(i) + "]", 0,
                                                            tokenizer.n_vocab() - 1));
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }
  if (prompt->is_array() && prompt->size() > 1) {
    return invalid_argument("\"prompt\" holds " + std::to_string(prompt->size()) +
                            " prompts; this server takes one prompt per request");
  }
  return invalid_argument("\"prompt\" must be a string or an array of token ids (one prompt per request)");
}

Result<std::vector<std::string>> read_stop(const FieldReader& f) {
  std::vector<std::string> stop;
  const Json* s = f.find("stop");
  if (s == nullptr) return stop;
  if (s->is_string()) {
    stop.push_back(s->get<std::string>());
    return stop;
  }
  if (!s->is_array()) return type_error("stop", "a string or an array of strings", *s);
  if (s->size() > 16) return invalid_argument("\"stop\" holds " + std::to_string(s->size()) + " strings; at most 16");
  for (size_t i = 0; i < s->size(); ++i) {
    const Json& item = (*s)[i];
    const std::string path = "stop[" + std::to_string(i) + "]";
    if (!item.is_string()) return type_error(path, "a string", item);
    if (item.get<std::string>().empty()) return invalid_argument("Invalid '" + path + "': empty string.");
    stop.push_back(item.get<std::string>());
  }
  return stop;
}

// Everything a Completions request says besides its prompt and the sampling extras.
struct CompletionFields {
  std::optional<double> temperature;
  std::optional<double> top_p;
  int64_t max_tokens = 16;  // OpenAI's default for this endpoint
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
};

Result<CompletionFields> read_completion_fields(const Json& body, int32_t n) {
  const FieldReader f(body);
  CompletionFields c;
  DI_ASSIGN_OR_RETURN(std::optional<bool> echo, f.boolean("echo"));
  if (echo.value_or(false)) return invalid_argument("echo is not supported");
  DI_ASSIGN_OR_RETURN(std::optional<std::string> suffix, f.string("suffix"));
  if (suffix) return invalid_argument("suffix is not supported");
  // More candidates than choices, keeping the best, is not implemented: best_of must be n.
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> best_of, f.integer({"best_of", 1, 16}));
  if (best_of && *best_of != n) {
    return invalid_argument("best_of is not supported beyond n: best_of (" + std::to_string(*best_of) +
                            ") must equal n (" + std::to_string(n) + ")");
  }
  DI_RETURN_IF_ERROR(f.string("user").status());
  DI_ASSIGN_OR_RETURN(c.temperature, f.number(recipe::kTemperatureSpec));
  DI_ASSIGN_OR_RETURN(c.top_p, f.number(recipe::kTopPSpec));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, f.integer({"max_tokens", 1, INT64_MAX}));
  c.max_tokens = max_tokens.value_or(c.max_tokens);
  DI_ASSIGN_OR_RETURN(c.stop, read_stop(f));
  DI_ASSIGN_OR_RETURN(std::optional<bool> stream, f.boolean("stream"));
  c.stream = stream.value_or(false);
  DI_ASSIGN_OR_RETURN(const Json* options, f.object("stream_options"));
  if (options != nullptr) {
    if (!c.stream) return invalid_argument("stream_options should be set along with stream = true");
    DI_ASSIGN_OR_RETURN(std::optional<bool> usage, FieldReader(*options, "stream_options").boolean("include_usage"));
    c.include_usage = usage.value_or(false);
  }
  return c;
}

const char* finish_name(FinishReason finish) {
  return finish == FinishReason::kLength ? "length" : "stop";
}

struct Sequence {
  std::string text;
  Json logprobs;  // {"tokens","token_logprobs","top_logprobs","text_offset"} or null
  int64_t n_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

void add_logprobs(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& lps, size_t text_offset, Json& out) {
  if (out.is_null()) {
    out = {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
           {"text_offset", Json::array()}};
  }
  for (const TokenLogprob& lp : lps) {
    const std::string piece = tokenizer.token_piece(lp.token);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(lp.logprob);
    Json top = Json::object();
    for (const TopLogprob& t : lp.top) top[tokenizer.token_piece(t.token)] = t.logprob;
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(text_offset);
    text_offset += piece.size();
  }
}

Json usage_json(int64_t prompt, int64_t cached, int64_t completion) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

void ApiServer::completions(const HttpRequest& request, ResponseWriter& out) {
  const auto arrival = RequestTimer::Clock::now();
  Admission admission(in_flight_, *metrics_, admission_limit());
  if (!admission.admitted()) return send_overloaded(out, ApiFlavor::kOpenAi);
  auto body = body_or_answer(request, ApiFlavor::kOpenAi, out);
  if (!body) return;
  auto fail = [&](const Status& s) { send_error(out, ApiFlavor::kOpenAi, api_error_from(s)); };
  auto model = FieldReader(*body).string("model");
  if (!model.ok()) return fail(model.status());
  if (*model && !check_model(**model, ApiFlavor::kOpenAi, out)) return;
  const Tokenizer& tokenizer = prompts_->tokenizer();
  auto prompt = read_prompt(*body, tokenizer);
  if (!prompt.ok()) return fail(prompt.status());
  auto extras = read_sampling_extras(*body, SamplingFields::kCompletions);
  if (!extras.ok()) return fail(extras.status());
  auto fields = read_completion_fields(*body, extras->n);
  if (!fields.ok()) return fail(fields.status());
  auto structured = read_structured_field(*body, /*with_response_format=*/true);
  if (!structured.ok()) return fail(structured.status());
  const bool stream = fields->stream;
  const bool include_usage = fields->include_usage;

  GenerationRequest g;
  g.prompt = std::move(prompt).value();
  g.max_tokens = fields->max_tokens;
  g.stop = std::move(fields->stop);
  apply_sampling(*extras, fields->temperature, fields->top_p, g);
  g.sampling.constraint = std::move(structured->constraint);
  const int32_t n = g.n;
  const bool want_logprobs = g.sampling.logprobs >= 0;
  auto handle = submit(request, std::move(g), ApiFlavor::kOpenAi, out);
  if (!handle) return;

  const std::string id = random_id("cmpl-");
  const int64_t created = unix_now();
  std::vector<Sequence> seqs(static_cast<size_t>(n));
  int64_t n_prompt = 0, n_cached = 0;
  auto chunk = [&](int32_t index, const std::string& text, const Json& logprobs, const char* finish) {
    Json c;
    c["id"] = id;
    c["object"] = "text_completion";
    c["created"] = created;
    c["model"] = config_.served_model_name;
    c["choices"] = Json::array({Json{{"index", index},
                                     {"text", text},
                                     {"logprobs", logprobs},
                                     {"finish_reason", finish ? Json(finish) : Json()}}});
    if (include_usage) c["usage"] = nullptr;
    return sse_data(dump(c));
  };
  bool started = false;
  auto on_event = [&](const TokenEvent& e) -> bool {
    Sequence& s = seqs[static_cast<size_t>(e.index)];
    if (e.n_prompt_tokens > 0) {
      n_prompt = e.n_prompt_tokens;
      n_cached = e.n_cached_prompt_tokens;
    }
    s.n_tokens += static_cast<int64_t>(e.tokens.size());
    Json lps;
    if (want_logprobs) add_logprobs(tokenizer, e.logprobs, s.text.size(), stream ? lps : s.logprobs);
    s.text += e.text;
    if (e.finish != FinishReason::kNone) s.finish = e.finish;
    if (!stream) return true;
    if (!started) {
      started = true;
      if (!out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
    }
    const char* finish = e.finish != FinishReason::kNone ? finish_name(e.finish) : nullptr;
    if (e.text.empty() && finish == nullptr && lps.is_null()) return true;
    return out.write(chunk(e.index, e.text, lps, finish));
  };
  RequestTimer timer(*metrics_, arrival);
  std::string failure;
  switch (pump_events(*handle, out, config_.poll_interval, timer, on_event, &failure)) {
    case PumpOutcome::kClientGone: return;
    case PumpOutcome::kFailed:
      return answer_engine_failure(out, ApiFlavor::kOpenAi, started, SseEvents::kUnnamed, failure);
    case PumpOutcome::kDone: break;
  }

  int64_t n_completion = 0;
  for (const Sequence& s : seqs) n_completion += s.n_tokens;
  if (stream) {
    if (!started) out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    if (include_usage) {
      Json last;
      last["id"] = id;
      last["object"] = "text_completion";
      last["created"] = created;
      last["model"] = config_.served_model_name;
      last["choices"] = Json::array();
      last["usage"] = usage_json(n_prompt, n_cached, n_completion);
      out.write(sse_data(dump(last)));
    }
    out.write("data: [DONE]\n\n");
    out.finish();
    return;
  }
  Json reply;
  reply["id"] = id;
  reply["object"] = "text_completion";
  reply["created"] = created;
  reply["model"] = config_.served_model_name;
  reply["choices"] = Json::array();
  for (int32_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    reply["choices"].push_back(
        {{"index", i}, {"text", s.text}, {"logprobs", s.logprobs}, {"finish_reason", finish_name(s.finish)}});
  }
  reply["usage"] = usage_json(n_prompt, n_cached, n_completion);
  send_json(out, 200, dump(reply));
}

}  // namespace deepinfer::server
