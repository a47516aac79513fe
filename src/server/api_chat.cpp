// POST /v1/chat/completions: the recipe's Chat Completions writer per choice, plus what the
// recipe (DeepSeek's API, n = 1, no logprobs) leaves out: choice indexes and logprobs.
#include <deque>

#include "recipe/output_parser.h"
#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

namespace {

struct Choice {
  Choice(const recipe::ParsingOptions& parsing, recipe::ChatResponseSettings settings, const BuiltPrompt& prompt)
      : parser(parsing), shaper(prompt), writer(std::move(settings)) {}
  recipe::OutputParser parser;
  OutputShaper shaper;
  bool ended = false;  // its last event was handled (a forced call or the parser ended it early)
  recipe::ChatCompletionWriter writer;
  Json pending_logprobs = Json::array();  // logprobs not yet attached to a streamed chunk
  Json all_logprobs = Json::array();
  FinishReason finish = FinishReason::kNone;
};

// The writer speaks for choice 0 without logprobs; this puts the choice's index and the
// logprobs gathered since the previous chunk into one of its chunks.
std::string patch_chunk(const std::string& chunk, int32_t index, Json* logprobs) {
  if (index == 0 && (logprobs == nullptr || logprobs->empty())) return chunk;
  Json j = Json::parse(chunk);
  Json& choice = j["choices"][0];
  choice["index"] = index;
  if (logprobs != nullptr && !logprobs->empty()) {
    choice["logprobs"] = {{"content", std::move(*logprobs)}};
    *logprobs = Json::array();
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The recipe's finish chunk carries the usage (DeepSeek's API does so); OpenAI's and vLLM's
// streams carry it only when stream_options.include_usage asks, and then in a chunk of its
// own after every choice's last one. This takes it out of the finish chunk: "usage": null
// like every other chunk with include_usage, no field at all without.
std::string without_usage(const std::string& chunk, bool include_usage) {
  Json j = Json::parse(chunk);
  if (include_usage) {
    j["usage"] = nullptr;
  } else {
    j.erase("usage");
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

void ApiServer::chat_completions(const HttpRequest& request, ResponseWriter& out) {
  const auto arrival = RequestTimer::Clock::now();
  Admission admission(in_flight_, *metrics_, admission_limit());
  if (!admission.admitted()) return send_overloaded(out, ApiFlavor::kOpenAi);
  std::optional<PreparedRequest> p = prepare(request, ApiFlavor::kOpenAi, recipe::convert_chat_completions,
                                             /*chat_logprobs=*/true, out);
  if (!p) return;
  const bool want_logprobs = p->generation.sampling.logprobs >= 0;
  const int32_t n = p->generation.n;
  auto handle = submit(request, p->generation, ApiFlavor::kOpenAi, out);
  if (!handle) return;

  recipe::ChatResponseSettings settings;
  settings.id = random_id("chatcmpl-");
  settings.model = config_.served_model_name;
  settings.created = unix_now();
  settings.thinking = p->converted.conversation.thinking_mode && prompts_->has_thinking_mode();
  settings.include_usage = p->converted.include_usage;
  std::deque<Choice> choices;  // deque: Choice is neither copyable nor cheap to move
  for (int32_t i = 0; i < n; ++i) choices.emplace_back(p->converted.parsing_options, settings, p->prompt);
  recipe::Usage usage;
  const bool stream = p->converted.stream;
  const bool include_usage = stream && p->converted.include_usage;
  const Tokenizer& tokenizer = prompts_->tokenizer();

  int32_t n_ended = 0;
  bool started = false;
  auto write = [&](const std::string& json) { return out.write(sse_data(json)); };
  auto on_event = [&](const TokenEvent& e) -> bool {
    Choice& c = choices[static_cast<size_t>(e.index)];
    if (c.ended) return true;
    if (e.n_prompt_tokens > 0) {
      usage.prompt_tokens = e.n_prompt_tokens;
      usage.prompt_cache_hit_tokens = e.n_cached_prompt_tokens;
    }
    usage.completion_tokens += static_cast<int64_t>(e.tokens.size());
    if (want_logprobs) {
      append_chat_logprobs(tokenizer, e.logprobs, stream ? c.pending_logprobs : c.all_logprobs);
    }
    FinishReason finish = e.finish;
    std::vector<recipe::OutputEvent> events = c.parser.feed(c.shaper.shape(e.text));
    // A closed forced call, a finished JSON answer or the end of the tool-call block: nothing
    // more can follow, so the sequence stops here rather than at max_tokens.
    if (finish == FinishReason::kNone && (c.shaper.done() || c.parser.finished())) {
      finish = FinishReason::kStop;
      // The engine cancels whole requests: once every choice has ended, nothing is left to wait for.
      if (n_ended + 1 == n) handle->cancel();
    }
    if (finish != FinishReason::kNone) {
      c.ended = true;
      ++n_ended;
      std::vector<recipe::OutputEvent> rest = c.parser.finish();
      events.insert(events.end(), rest.begin(), rest.end());
      c.finish = finish;
    }
    if (!stream) {
      c.writer.add_events(events);
      return true;
    }
    if (!started) {
      started = true;
      if (!out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
      for (int32_t i = 0; i < n; ++i) {
        if (!write(patch_chunk(choices[static_cast<size_t>(i)].writer.start_chunk(), i, nullptr))) return false;
      }
    }
    for (const std::string& chunk : c.writer.event_chunks(events)) {
      if (!write(patch_chunk(chunk, e.index, &c.pending_logprobs))) return false;
    }
    if (finish != FinishReason::kNone) {
      const std::string last = without_usage(c.writer.finish_chunk(backend_finish(finish), usage), include_usage);
      if (!write(patch_chunk(last, e.index, &c.pending_logprobs))) return false;
    }
    return true;
  };
  RequestTimer timer(*metrics_, arrival);
  std::string failure;
  switch (pump_events(*handle, out, config_.poll_interval, timer, on_event, &failure)) {
    case PumpOutcome::kClientGone: return;  // the request is cancelled
    case PumpOutcome::kFailed: return answer_engine_failure(out, ApiFlavor::kOpenAi, started, SseEvents::kUnnamed, failure);
    case PumpOutcome::kDone: break;
  }

  if (stream) {
    if (!started) out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    if (include_usage) {
      // The usage of every choice together, in the recipe's usage shape, with no choices.
      Json last = Json::parse(choices[0].writer.finish_chunk(backend_finish(choices[0].finish), usage));
      last["choices"] = Json::array();
      out.write(sse_data(last.dump(-1, ' ', false, Json::error_handler_t::replace)));
    }
    out.write("data: [DONE]\n\n");
    out.finish();
    return;
  }
  if (n == 1 && !want_logprobs) {
    return send_json(out, 200, choices[0].writer.body(backend_finish(choices[0].finish), usage));
  }
  Json body = Json::parse(choices[0].writer.body(backend_finish(choices[0].finish), usage));
  Json merged = Json::array();
  for (int32_t i = 0; i < n; ++i) {
    Choice& c = choices[static_cast<size_t>(i)];
    Json one = i == 0 ? body["choices"][0] : Json::parse(c.writer.body(backend_finish(c.finish), usage))["choices"][0];
    one["index"] = i;
    if (want_logprobs) one["logprobs"] = {{"content", std::move(c.all_logprobs)}};
    merged.push_back(std::move(one));
  }
  body["choices"] = std::move(merged);
  send_json(out, 200, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace deepinfer::server
