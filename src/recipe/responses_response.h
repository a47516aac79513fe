// OpenAI Responses responses from parser events (recipe-spec.md §2.11): the SSE event sequence
// of a streamed response and the body of a complete one, as deepseek-recipe 0.2.0 writes them.
// One writer per response, used from one thread.
//
// A Responses response object reports the request's settings back (instructions, tools, tool
// choice, sampling values...). ResponsesEcho carries them, read once from the request body, so
// the writer needs no JSON from its caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deepinfer/status.h"
#include "recipe/chat_response.h"
#include "recipe/output_parser.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {

struct ResponsesEvent {
  std::string type;  // the SSE event name: "response.created", "response.output_text.delta", ...
  std::string json;
  std::string sse() const { return "event: " + type + "\ndata: " + json + "\n\n"; }
};

struct ResponsesEcho {
  // The reported request settings, one compact JSON object whose keys are response fields
  // (instructions, max_output_tokens, reasoning, temperature, text, tool_choice, tools,
  // top_logprobs, top_p, user). Empty: an unspecified request's values.
  std::string settings_json;
  // Tool names as conversion gave them ("ns::fn" for V4.1, "ns__fn" for V4) -> (namespace,
  // local name): a call of one is reported as {"namespace": ns, "name": fn}.
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> namespace_tools;
  // Declared custom tools (only apply_patch is accepted): their calls are custom_tool_call
  // items whose input is the "input" string of the arguments the model wrote.
  std::set<std::string> custom_tools;
};

// Reads the echo from a Responses request body that convert_responses accepted for `version`.
Result<ResponsesEcho> responses_echo(std::string_view body, ModelVersion version);

struct ResponsesResponseSettings {
  std::string id;
  std::string model;
  ResponsesEcho echo;
  // Id of the k-th tool call; the default is "call_{k:02}_" + 24 random alphanumerics.
  std::function<std::string(size_t)> tool_call_id;
  // Unix seconds for created_at (read once, at construction) and completed_at; default: now.
  std::function<int64_t()> clock;
};

class ResponsesWriter {
 public:
  explicit ResponsesWriter(ResponsesResponseSettings settings);
  ~ResponsesWriter();
  ResponsesWriter(ResponsesWriter&&) noexcept;
  ResponsesWriter& operator=(ResponsesWriter&&) noexcept;

  // response.created, response.in_progress.
  std::vector<ResponsesEvent> start();
  std::vector<ResponsesEvent> events(const std::vector<OutputEvent>& events);
  // Closes the open item, then response.completed (or response.incomplete for kLength and
  // kContentFilter), with usage.
  std::vector<ResponsesEvent> finish(BackendFinish finish, const Usage& usage);
  // The complete response from everything passed to events(): what response.completed carries.
  std::string body(BackendFinish finish, const Usage& usage) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace deepinfer::recipe
