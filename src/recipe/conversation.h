// The conversation model: what a chat request means once its protocol is stripped away.
//
// Protocol adapters (Chat Completions, Responses, Messages) build a Conversation from request
// JSON; prompt encoders (dsv4_encoding.h) turn one into prompt text. These are plain values with
// no JSON type in them: a tool's parameter schema is carried as compact JSON text, because the
// encoders only ever re-print it. Cheap to copy, safe to share read-only between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer::recipe {

enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };

enum class ImageDetail { kLow, kHigh, kOriginal, kAuto };

// An image stays a placeholder here: the recipe library does no I/O, so fetching and decoding
// belong to the caller. `location` is the URL, the data URL, or the raw encoded bytes.
struct ImageSource {
  enum class Kind { kDataUrl, kUrl, kBytes };
  Kind kind = Kind::kUrl;
  std::string location;
  ImageDetail detail = ImageDetail::kHigh;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // meant to be a JSON object; not validated (the encoder copes)
};

struct ToolDefinition {
  std::string name;
  std::optional<std::string> description;
  std::string parameters_json = "null";  // compact JSON, key order as the client sent it
  std::optional<bool> strict;            // passed through, never enforced
};

struct Message {
  Role role = Role::kUser;
  // For user and tool messages, the first image_sources.size() occurrences of the image token
  // in the content are the placeholders of the images, in order; later ones are plain text.
  std::string content;
  std::vector<ImageSource> image_sources;   // user, tool (and system) messages
  std::optional<std::string> reasoning;     // assistant only
  std::vector<ToolCall> tool_calls;         // assistant only
  std::optional<std::string> tool_call_id;  // tool only
  bool prefix = false;                      // assistant only: the turn is continued, not closed
  std::optional<std::vector<ToolDefinition>> tools;  // system only: tools announced mid-way

  static Message system(std::string content);
  static Message user(std::string content, std::vector<ImageSource> images = {});
  static Message assistant(std::string content, std::optional<std::string> reasoning = std::nullopt,
                           std::vector<ToolCall> calls = {});
  static Message tool(std::string content, std::string tool_call_id);
  static Message latest_reminder(std::string content);
};

enum class ToolChoice { kAuto, kNone, kRequired };

// The recipe's four levels; adapters map the protocols' words onto them (minimal/low -> kLow,
// medium/high -> kHigh, xhigh -> kXhigh, max/ultra -> kMax).
enum class ReasoningEffort { kLow, kHigh, kXhigh, kMax };

enum class ResponseFormat { kText, kJsonObject };

struct Conversation {
  std::vector<Message> messages;
  bool thinking_mode = true;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::optional<ReasoningEffort> reasoning_effort;
  ResponseFormat response_format = ResponseFormat::kText;
};

// Sampling settings a request carries; unset means "the server's default".
struct InferenceOptions {
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> thinking_budget_tokens;
  bool disable_parallel_tool_use = false;
  // Anthropic's tool_choice "any": the prompt is Auto's (deepseek-recipe does not force it), but
  // the answer must be a call of one of the tools, which a grammar can enforce (server/).
  bool must_call_tool = false;
  // Structured output the protocol asked for (response_format, text.format, output_format).
  Constraint constraint;
};

// Where the output parser starts when thinking is on (recipe-spec.md §3.1).
enum class ThinkingInitialStage { kReasoningStart, kReasoningContinuation, kContentContinuation };

// How the model writes tool calls: DeepSeek's DSML block, or JSON between <tool_call> and
// </tool_call> ({"name": ..., "arguments": {...}}, or an array of them), as the chat templates
// of Qwen, Hermes and SmolLM-style models define.
enum class ToolCallFormat { kDsml, kTaggedJson };

struct ParsingOptions {
  bool parse_tool_calls = true;
  ToolCallFormat tool_call_format = ToolCallFormat::kDsml;
  bool starts_in_tool_calls = false;  // the prompt opened the DSML block (tool_choice required)
  bool parse_json_output = false;
  std::optional<ThinkingInitialStage> thinking_initial_stage;  // nullopt: thinking is off
  std::vector<std::string> stop_sequences;
};

const char* role_name(Role role);                           // "system", "user", ...
const char* reasoning_effort_name(ReasoningEffort effort);  // "low", "high", "xhigh", "max"
std::optional<Role> parse_role(std::string_view name);
std::optional<ReasoningEffort> parse_reasoning_effort(std::string_view name);
std::optional<ToolChoice> parse_tool_choice(std::string_view name);
std::optional<ImageDetail> parse_image_detail(std::string_view name);

}  // namespace deepinfer::recipe
