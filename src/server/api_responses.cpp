// POST /v1/responses: OpenAI Responses through the recipe's adapter and ResponsesWriter.
#include "recipe/output_parser.h"
#include "recipe/responses_response.h"
#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

void ApiServer::responses(const HttpRequest& request, ResponseWriter& out) {
  const auto arrival = RequestTimer::Clock::now();
  Admission admission(in_flight_, *metrics_, admission_limit());
  if (!admission.admitted()) return send_overloaded(out, ApiFlavor::kOpenAi);
  std::optional<PreparedRequest> p =
      prepare(request, ApiFlavor::kOpenAi, recipe::convert_responses, /*chat_logprobs=*/false, out);
  if (!p) return;
  p->generation.n = 1;
  p->generation.sampling.logprobs = -1;
  auto echo = recipe::responses_echo(request.body, p->converted.model_version);
  if (!echo.ok()) {
    return send_error(out, ApiFlavor::kOpenAi, {recipe::error_status(echo.status()), echo.status().message(), "", ""});
  }
  auto handle = submit(request, p->generation, ApiFlavor::kOpenAi, out);
  if (!handle) return;

  recipe::ResponsesResponseSettings settings;
  settings.id = random_id("resp_");
  settings.model = config_.served_model_name;
  settings.echo = std::move(echo).value();
  recipe::ResponsesWriter writer(std::move(settings));
  const bool stream = p->converted.stream;
  SingleSequenceOutput output(p->prompt, p->converted.parsing_options);
  bool started = false;
  auto send_events = [&](const std::vector<recipe::ResponsesEvent>& events) {
    for (const recipe::ResponsesEvent& e : events) {
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
      if (!send_events(writer.start())) return false;
    }
    if (!send_events(writer.events(events))) return false;
    if (output.ended()) return send_events(writer.finish(backend_finish(output.finish()), output.usage()));
    return true;
  };
  RequestTimer timer(*metrics_, arrival);
  std::string failure;
  switch (pump_events(*handle, out, config_.poll_interval, timer, on_event, &failure)) {
    case PumpOutcome::kClientGone: return;
    case PumpOutcome::kFailed:
      return answer_engine_failure(out, ApiFlavor::kOpenAi, started, SseEvents::kNamed, failure);
    case PumpOutcome::kDone: break;
  }
  if (stream) {
    out.finish();
    return;
  }
  send_json(out, 200, writer.body(backend_finish(output.finish()), output.usage()));
}

}  // namespace deepinfer::server
