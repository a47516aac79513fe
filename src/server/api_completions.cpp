// POST /v1/completions: raw text (or token ids) in, text out; no chat template, no recipe
// parsing. The response and chunk shapes are OpenAI's legacy Completions API.
#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

namespace {

// The prompt as ids: a string, an array of token ids, or a one-element array of either.
Result<std::vector<int32_t>> read_prompt(const Json& body, const Tokenizer& tokenizer) {
  if (!body.contains("prompt")) return invalid_argument("\"prompt\" is required");
  const Json* prompt = &body["prompt"];
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    prompt = &(*prompt)[0];
  }
  if (prompt->is_string()) {
    EncodeOptions options;
    options.add_bos = tokenizer.add_bos_by_default();
    return tokenizer.encode(prompt->get<std::string>(), options);
  }
  if (prompt->is_array() && !prompt->empty()) {
    std::vector<int32_t> ids;
    for (const Json& t : *prompt) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.n_vocab()) {
        return invalid_argument("\"prompt\" token ids must be integers in [0, " + std::to_string(tokenizer.n_vocab()) + ")");
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return ids;
  }
  return invalid_argument("\"prompt\" must be a string or an array of token ids (one prompt per request)");
}

Result<std::vector<std::string>> read_stop(const Json& body) {
  std::vector<std::string> stop;
  if (!body.contains("stop") || body["stop"].is_null()) return stop;
  const Json& s = body["stop"];
  if (s.is_string()) {
    stop.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= 16) {
    for (const Json& item : s) {
      if (!item.is_string() || item.get<std::string>().empty()) return invalid_argument("\"stop\" entries must be non-empty strings");
      stop.push_back(item.get<std::string>());
    }
  } else {
    return invalid_argument("\"stop\" must be a string or an array of at most 16 strings");
  }
  return stop;
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
  if (body->contains("model") && (*body)["model"].is_string() &&
      !check_model((*body)["model"].get<std::string>(), ApiFlavor::kOpenAi, out)) {
    return;
  }
  auto fail = [&](const Status& s) { send_error(out, ApiFlavor::kOpenAi, api_error_from(s)); };
  if (bool_field(*body, "echo", false)) return fail(invalid_argument("echo is not supported"));
  if (body->contains("suffix") && !(*body)["suffix"].is_null()) return fail(invalid_argument("suffix is not supported"));
  const Tokenizer& tokenizer = prompts_->tokenizer();
  auto prompt = read_prompt(*body, tokenizer);
  if (!prompt.ok()) return fail(prompt.status());
  auto stop = read_stop(*body);
  if (!stop.ok()) return fail(stop.status());
  auto extras = read_sampling_extras(*body, /*chat_logprobs=*/false);
  if (!extras.ok()) return fail(extras.status());
  std::optional<double> temperature, top_p;
  if (body->contains("temperature") && (*body)["temperature"].is_number()) temperature = (*body)["temperature"].get<double>();
  if (body->contains("top_p") && (*body)["top_p"].is_number()) top_p = (*body)["top_p"].get<double>();
  int64_t max_tokens = 16;  // OpenAI's default for this endpoint
  if (body->contains("max_tokens") && !(*body)["max_tokens"].is_null()) {
    if (!(*body)["max_tokens"].is_number_integer() || (*body)["max_tokens"].get<int64_t>() < 1) {
      return fail(invalid_argument("max_tokens must be a positive integer"));
    }
    max_tokens = (*body)["max_tokens"].get<int64_t>();
  }
  const bool stream = bool_field(*body, "stream", false);
  const bool include_usage =
      stream && body->contains("stream_options") && bool_field((*body)["stream_options"], "include_usage", false);

  GenerationRequest g;
  g.prompt = std::move(prompt).value();
  g.max_tokens = max_tokens;
  g.stop = std::move(stop).value();
  apply_sampling(*extras, temperature, top_p, g);
  const int32_t n = g.n;
  const bool want_logprobs = g.sampling.logprobs >= 0;
  auto handle = submit_or_answer(engine_, std::move(g), ApiFlavor::kOpenAi, out);
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
