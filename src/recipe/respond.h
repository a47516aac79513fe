// One request and one raw model output -> the protocol's response, for offline use (the
// `deepinfer parse` command, tests, benchmarks): the adapter, the output parser and the
// protocol's writer chained. The server drives the same pieces itself, token by token.
// Pure functions of their inputs apart from the default ids and clock; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"
#include "recipe/chat_response.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {

enum class Protocol { kChat, kResponses, kMessages };

// `text` in pieces of `n` UTF-8 characters each (n = 0: one piece; none for an empty text).
std::vector<std::string_view> split_chars(std::string_view text, size_t n);

// "chat", "responses", "messages".
std::optional<Protocol> parse_protocol(std::string_view name);

// The protocol's adapter (convert_chat_completions, convert_responses or convert_messages).
Result<ConversationRequest> convert_request(Protocol protocol, std::string_view body,
                                            const ConversionOptions& options = {});

struct RespondSettings {
  std::string id = "resp-0";
  std::optional<std::string> model;  // reported model; default: the request's
  int64_t created = 0;               // chat "created"
  bool stream = false;               // SSE events instead of the complete body
  // Streamed: the output is fed this many characters (UTF-8) at a time; 0: all at once.
  size_t chunk_chars = 0;
  BackendFinish finish = BackendFinish::kStop;
  Usage usage{0, 0, -1};  // prompt counts as given; completion_tokens < 0: one per fed chunk
  std::function<std::string(size_t)> tool_call_id;  // default: random (see chat_response.h)
  std::function<int64_t()> clock;                   // Responses timestamps; default: now
};

// The response to `request_body` whose model wrote `output`: the complete body (JSON), or the
// SSE stream (each event framed, chat's "data: [DONE]" last). Errors: the request's 400.
Result<std::string> respond(Protocol protocol, std::string_view request_body,
                            std::string_view output, const RespondSettings& settings,
                            const ConversionOptions& options = {});

}  // namespace deepinfer::recipe
