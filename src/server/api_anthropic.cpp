// POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages through the recipe's
// adapter and MessagesWriter; errors in Anthropic's shape.
#include "recipe/messages_response.h"
#include "recipe/output_parser.h"
#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

void ApiServer::messages(const HttpRequest& request, ResponseWriter& out) {
  const auto arrival = RequestTimer::Clock::now();
  Admission admission(in_flight_, *metrics_, admission_limit());
  if (!admission.admitted()) return send_overloaded(out, ApiFlavor::kAnthropic);
  std::optional<PreparedRequest> p =
      prepare(request, ApiFlavor::kAnthropic, recipe::convert_messages, /*chat_logprobs=*/false, out);
  if (!p) return;
  p->generation.n = 1;
  p->generation.sampling.logprobs = -1;
  auto handle = submit_or_answer(engine_, p->generation, ApiFlavor::kAnthropic, out);
  if (!handle) return;

  recipe::MessagesResponseSettings settings;
  settings.id = random_id("msg_");
  settings.model = config_.served_model_name;
  settings.thinking = p->converted.conversation.thinking_mode && prompts_->has_thinking_mode();
  recipe::MessagesWriter writer(settings);
  recipe::OutputParser parser(p->converted.parsing_options);
  const bool stream = p->converted.stream;
  recipe::Usage usage;
  usage.prompt_tokens = static_cast<int64_t>(p->prompt.ids.size());
  FinishReason finish = FinishReason::kNone;
  std::optional<std::string> stop_sequence;

  bool started = false;
  OutputShaper shaper(p->prompt);
  bool ended = false;  // the last event was handled (a forced call or the parser ended it early)
  auto send_events = [&](const std::vector<recipe::MessagesEvent>& events) {
    for (const recipe::MessagesEvent& e : events) {
      if (!out.write(e.sse())) return false;
    }
    return true;
  };
  auto on_event = [&](const TokenEvent& e) -> bool {
    if (ended) return true;
    if (e.n_prompt_tokens > 0) {
      usage.prompt_tokens = e.n_prompt_tokens;
      usage.prompt_cache_hit_tokens = e.n_cached_prompt_tokens;
    }
    usage.completion_tokens += static_cast<int64_t>(e.tokens.size());
    std::vector<recipe::OutputEvent> events = parser.feed(shaper.shape(e.text));
    // A closed forced call, a finished JSON answer or the end of the tool-call block: nothing
    // more can follow, so generation stops here rather than at max_tokens.
    FinishReason event_finish = e.finish;
    if (event_finish == FinishReason::kNone && (shaper.done() || parser.finished())) {
      event_finish = FinishReason::kStop;
      handle->cancel();
    }
    if (event_finish != FinishReason::kNone) {
      ended = true;
      std::vector<recipe::OutputEvent> rest = parser.finish();
      events.insert(events.end(), rest.begin(), rest.end());
      finish = event_finish;
      if (e.finish == FinishReason::kStop && !e.stop_string.empty()) stop_sequence = e.stop_string;
    }
    if (!stream) {
      writer.events(events);
      return true;
    }
    if (!started) {
      started = true;
      if (!out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
      recipe::Usage start_usage = usage;
      start_usage.completion_tokens = 0;
      if (!send_events(writer.start(start_usage))) return false;
    }
    if (!send_events(writer.events(events))) return false;
    if (finish != FinishReason::kNone) return send_events(writer.finish(backend_finish(finish), usage, stop_sequence));
    return true;
  };
  RequestTimer timer(*metrics_, arrival);
  if (!pump_events(*handle, out, config_.poll_interval, timer, on_event)) return;
  if (stream) {
    out.finish();
    return;
  }
  send_json(out, 200, writer.body(backend_finish(finish), usage, stop_sequence));
}

void ApiServer::count_tokens(const HttpRequest& request, ResponseWriter& out) {
  auto body = body_or_answer(request, ApiFlavor::kAnthropic, out);
  if (!body) return;
  // count_tokens requests carry no max_tokens, which the Messages adapter requires.
  if (!body->contains("max_tokens")) (*body)["max_tokens"] = 1;
  if (body->contains("model") && (*body)["model"].is_string() &&
      !check_model((*body)["model"].get<std::string>(), ApiFlavor::kAnthropic, out)) {
    return;
  }
  auto converted = recipe::convert_messages(body->dump(), conversion_options());
  if (!converted.ok()) {
    send_error(out, ApiFlavor::kAnthropic,
               {recipe::error_status(converted.status()), converted.status().message(), "", ""});
    return;
  }
  auto prompt = prompts_->build(*converted);
  if (!prompt.ok()) return send_error(out, ApiFlavor::kAnthropic, api_error_from(prompt.status()));
  Json reply;
  reply["input_tokens"] = prompt->ids.size();
  send_json(out, 200, reply.dump());
}

}  // namespace deepinfer::server
