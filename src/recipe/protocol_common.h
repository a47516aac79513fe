// Validation and mapping rules shared by the protocol adapters (internal to src/recipe).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"
#include "recipe/conversation.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {

// "invalid request body: <what>": a body that is JSON but not of the protocol's shape.
Status malformed(const std::string& what);

// Parses a request body and hands it to `convert`. The adapters read every field through
// request_fields.h, which checks its type first; should a read still throw, no exception
// leaves the module and the library's text (its "[json.exception...]" codes) stays out of the
// answer: it is a 400 in our words.
template <typename Convert>
Result<ConversationRequest> parse_then_convert(std::string_view body, Convert&& convert) {
  nlohmann::ordered_json req = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return invalid_argument("invalid JSON request");
  try {
    return convert(req);
  } catch (const nlohmann::json::exception&) {
    return malformed("a field has a value of the wrong type");
  }
}

// object[key] when it is a string, else "" (for fields already validated, or optional ones
// where any other value means "none").
std::string string_or_empty(const nlohmann::ordered_json& object, const char* key);

// minimal/low -> kLow, medium/high -> kHigh, xhigh -> kXhigh, max/ultra -> kMax; else nullopt
// ("none" included: it switches thinking off rather than naming a level).
std::optional<ReasoningEffort> map_effort_word(std::string_view word);

Result<ModelVersion> resolve_model(const std::string& model, const ConversionOptions& options);

// 1-128 bytes of [A-Za-z0-9_-]; `where` names the field in the message ("tools[0].function.name").
Status validate_tool_name(const std::string& name, const std::string& where);

// The parameters must be a JSON Schema object with "type": "object".
Status validate_tool_schema(const std::string& tool_name, const nlohmann::ordered_json& schema);

// strict: true -> "additionalProperties": false and every property required (OpenAI's rule).
Status normalize_strict_schema(nlohmann::ordered_json& schema);

// Every assistant message with tool_calls must be followed at once by one tool message per
// call id, and a tool message must follow such a group. `messages` is the request's array
// (indices in the messages are the request's).
Status check_tool_responses(const nlohmann::ordered_json& messages);

// Whether "json" (ASCII, any case) occurs in `s`: JSON output needs the word in the prompt.
bool contains_json_word(std::string_view s);

// Where the output parser starts in thinking mode, given how the conversation ends.
ThinkingInitialStage initial_stage(const Conversation& conversation);

// Thinking unless the request says otherwise: the options' default, never for a model rendered
// by its chat template (ModelVersion::kChatTemplate).
bool default_thinking(const ConversionOptions& options, ModelVersion version);

// What every adapter does last. Sets the parsing options, the same for every protocol: tool
// calls when tools are offered (in the served model's format), the DSML block the prompt opens
// for tool_choice required, JSON output, stop sequences, the thinking stage. A kChatTemplate
// model has no thinking mode: it is switched off even when the request asked for it.
void finish_conversion(ConversationRequest& request, std::vector<std::string> stop_sequences);

}  // namespace deepinfer::recipe
