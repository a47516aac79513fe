// libFuzzer target of the protocol adapters (src/recipe/protocol.h): any bytes, as a request
// body, go to Chat Completions, Responses and Anthropic Messages, each with the default
// ConversionOptions and with a second set (thinking off by default, web search handled the
// other way, a chat-template model, small max_tokens bounds). Every outcome must be one of:
//   - a rejection with INVALID_ARGUMENT (HTTP 400), a non-empty message, and an error body
//     that is valid JSON carrying that message;
//   - a conversation that both DeepSeek encoders render to valid UTF-8 starting with BOS,
//     with special-token ranges in order and inside the text.
// The same bytes are also model output for the streaming output parser (options picked by the
// first byte): fed whole and in chunks (size picked by the second byte), the merged events and
// the finished() state must agree.
// Hangs are libFuzzer timeouts (scripts/fuzz passes -timeout). Built and run by scripts/fuzz.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "recipe/dsv4_encoding.h"
#include "recipe/output_parser.h"
#include "recipe/protocol.h"

namespace {

using namespace deepinfer::recipe;

[[noreturn]] void fail(const char* adapter, const char* what, const std::string& detail) {
  std::fprintf(stderr, "recipe_fuzz: %s: %s: %s\n", adapter, what, detail.c_str());
  std::abort();
}

bool valid_utf8(std::string_view s) {
  // nlohmann's parser rejects invalid UTF-8 inside strings: a JSON string of `s` round-trips
  // only if `s` is valid.
  try {
    (void)nlohmann::json::parse(nlohmann::json(std::string(s)).dump());
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void check_rejection(const char* adapter, const deepinfer::Status& status) {
  if (status.code() != deepinfer::StatusCode::kInvalidArgument) fail(adapter, "not a 400", status.to_string());
  if (status.message().empty()) fail(adapter, "empty error message", status.to_string());
  if (error_status(status) != 400) fail(adapter, "error_status is not 400", status.to_string());
  const std::string body = error_body(status);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    fail(adapter, "the 400 body is not valid JSON", body);
  }
  const auto& error = parsed["error"];
  if (!error.is_object() || !error["message"].is_string() || error["type"] != "invalid_request_error") {
    fail(adapter, "the 400 body lacks error.message or error.type", body);
  }
  if (error["message"].get<std::string>() != status.message()) fail(adapter, "the body's message differs", body);
}

void check_conversation(const char* adapter, const ConversationRequest& request) {
  for (PromptEncoding encoding : {PromptEncoding::kDeepseekV4, PromptEncoding::kDeepseekV41}) {
    const RenderedPrompt prompt = render_prompt(request.conversation, encoding);
    const std::string text = prompt.text();
    if (text.rfind(kBosToken, 0) != 0) fail(adapter, "the prompt does not start with BOS", text.substr(0, 200));
    if (!valid_utf8(text)) fail(adapter, "the prompt is not valid UTF-8", text.substr(0, 200));
    size_t last_end = 0;
    for (const auto& [begin, end] : prompt.special_ranges()) {
      if (begin < last_end || end <= begin || end > text.size()) fail(adapter, "bad special-token range", text.substr(0, 200));
      last_end = end;
    }
  }
}

template <typename Convert>
void exercise(const char* adapter, Convert convert, std::string_view body, const ConversionOptions& options) {
  auto converted = convert(body, options);
  if (converted.ok()) {
    check_conversation(adapter, *converted);
  } else {
    check_rejection(adapter, converted.status());
  }
}

// Events with runs of one kind joined (what must not depend on the chunking), and finished().
std::string parse_merged(const ParsingOptions& options, std::string_view output, size_t chunk) {
  OutputParser parser(options);
  std::string merged;
  int last_kind = -1;
  auto add = [&](const std::vector<OutputEvent>& events) {
    for (const OutputEvent& e : events) {
      const int kind = static_cast<int>(e.kind);
      if (kind != last_kind || e.kind == OutputEvent::Kind::kToolCall) {
        merged += "\x01" + std::to_string(kind) + ":";
      }
      merged += e.text;
      last_kind = kind;
    }
  };
  for (size_t i = 0; i < output.size(); i += chunk) add(parser.feed(output.substr(i, chunk)));
  const bool finished_before_end = parser.finished();
  add(parser.finish());
  return merged + (finished_before_end ? "\x02finished" : "");
}

void check_parser(std::string_view output) {
  if (output.size() < 2) return;
  const auto pick = static_cast<uint8_t>(output[0]);
  const auto cut = static_cast<uint8_t>(output[1]);
  ParsingOptions o;
  o.parse_tool_calls = pick & 1;
  o.parse_json_output = pick & 2;
  o.starts_in_tool_calls = pick & 4;
  if (pick & 8) o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
  if (pick & 16) o.tool_call_format = ToolCallFormat::kTaggedJson;
  if (pick & 32) o.stop_sequences = {"STOP", "\n\n\n"};
  const std::string whole = parse_merged(o, output, output.size());
  const std::string chunked = parse_merged(o, output, 1 + cut % 17);
  if (whole != chunked) fail("output parser", "events depend on the chunking", whole + " | " + chunked);
}

ConversionOptions other_options() {
  ConversionOptions o;
  o.default_thinking_mode = false;
  o.responses_web_search = WebSearchBehavior::kReject;
  o.messages_web_search = WebSearchBehavior::kDrop;
  o.thinking_max_tokens_upper_bound = 4096;
  o.non_thinking_max_tokens_upper_bound = 1000;
  o.model_versions.emplace_back("served-model", ModelVersion::kChatTemplate);
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ConversionOptions kOptions[] = {ConversionOptions{}, other_options()};
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const ConversionOptions& options : kOptions) {
    exercise("chat", convert_chat_completions, body, options);
    exercise("responses", convert_responses, body, options);
    exercise("messages", convert_messages, body, options);
  }
  check_parser(body);
  return 0;
}
