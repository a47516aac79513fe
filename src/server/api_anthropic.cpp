// POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages through the recipe's
// adapter and MessagesWriter; errors in Anthropic's shape.
#include "recipe/messages_response.h"
#include "recipe/output_parser.h"
#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

namespace {

// The recipe's Messages adapter under Anthropic's rule that max_tokens is required (the
// recipe's default follows deepseek-recipe, which accepts a request without it).
Result<recipe::ConversationRequest> convert_anthropic_messages(std::string_view body,
                                                               const recipe::ConversionOptions& options) {
  recipe::ConversionOptions anthropic = options;
  anthropic.messages_require_max_tokens = true;
  return recipe::convert_messages(body, anthropic);
}

}  // namespace

void ApiServer::messages(const HttpRequest& request, ResponseWriter& out) {
  const auto arrival = RequestTimer::Clock::now();
  Admission admission(in_flight_, *metrics_, admission_limit());
  if (!admission.admitted()) return send_overloaded(out, ApiFlavor::kAnthropic);
  std::optional<PreparedRequest> p =
      prepare(request, ApiFlavor::kAnthropic, convert_anthropic_messages, /*chat_logprobs=*/false, out);
  if (!p) return;
  p->generation.n = 1;
  p->generation.sampling.logprobs = -1;
  auto handle = submit(request, p->generation, ApiFlavor::kAnthropic, out);
  if (!handle) return;

  recipe::MessagesResponseSettings settings;
  settings.id = random_id("msg_");
  settings.model = config_.served_model_name;
  settings.thinking = p->converted.conversation.thinking_mode && prompts_->has_thinking_mode();
  recipe::MessagesWriter writer(settings);
  const bool stream = p->converted.stream;
  SingleSequenceOutput output(p->prompt, p->converted.parsing_options);
  bool started = false;
  auto send_events = [&](const std::vector<recipe::MessagesEvent>& events) {
    for (const recipe::MessagesEvent& e : events) {
      if (!out.write(e.sse())) return false;
    }
    return true;
  };
  auto on_event = [&](const TokenEvent& e) -> bool {
    if (output.ended()) return true;
    const std::vector<recipe::OutputEvent> events = output.on_event(e, *handle);
    if (!stream) {
      writer.events(events);
      return true;
    }
    if (!started) {
      started = true;
      if (!out.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
      recipe::Usage start_usage = output.usage();
      start_usage.completion_tokens = 0;
      if (!send_events(writer.start(start_usage))) return false;
    }
    if (!send_events(writer.events(events))) return false;
    if (output.ended()) {
      return send_events(writer.finish(backend_finish(output.finish()), output.usage(), output.stop_sequence()));
    }
    return true;
  };
  RequestTimer timer(*metrics_, arrival);
  std::string failure;
  switch (pump_events(*handle, out, config_.poll_interval, timer, on_event, &failure)) {
    case PumpOutcome::kClientGone: return;
    case PumpOutcome::kFailed: return answer_engine_failure(out, ApiFlavor::kAnthropic, started, SseEvents::kNamed, failure);
    case PumpOutcome::kDone: break;
  }
  if (stream) {
    out.finish();
    return;
  }
  send_json(out, 200, writer.body(backend_finish(output.finish()), output.usage(), output.stop_sequence()));
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
