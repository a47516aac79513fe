#include "recipe/protocol_common.h"

#include <set>

#include "recipe/prompt_json.h"

namespace deepinfer::recipe {

Status malformed(const std::string& what) { return invalid_argument("invalid request body: " + what); }

using Json = nlohmann::ordered_json;

std::optional<ReasoningEffort> map_effort_word(std::string_view word) {
  if (word == "minimal" || word == "low") return ReasoningEffort::kLow;
  if (word == "medium" || word == "high") return ReasoningEffort::kHigh;
  if (word == "xhigh") return ReasoningEffort::kXhigh;
  if (word == "max" || word == "ultra") return ReasoningEffort::kMax;
  return std::nullopt;
}

Result<ModelVersion> resolve_model(const std::string& model, const ConversionOptions& options) {
  std::string names;
  for (const auto& [name, version] : options.model_versions) {
    if (name == model) return version;
    if (!names.empty()) names += ", ";
    names += name;
  }
  return invalid_argument("The supported API model names are " + names + ", but you passed " +
                          model + ".");
}

Status validate_tool_name(const std::string& name, const std::string& where) {
  if (name.empty()) {
    return invalid_argument("Invalid '" + where +
                            "': empty string. Expected a string with minimum length 1, but got an "
                            "empty string instead.");
  }
  if (name.size() > 128) {
    return invalid_argument("Invalid '" + where +
                            "': string too long. Expected a string with maximum length 128, but "
                            "got a string with length " +
                            std::to_string(name.size()) + " instead.");
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) {
      return invalid_argument("Invalid '" + where +
                              "': string does not match pattern. Expected a string that matches "
                              "the pattern '^[a-zA-Z0-9_-]+$'.");
    }
  }
  return Status();
}

Status validate_tool_schema(const std::string& tool_name, const Json& schema) {
  const std::string prefix = "Invalid schema for function '" + tool_name + "': ";
  if (!schema.is_object() && !schema.is_boolean()) {
    return invalid_argument(prefix + schema.dump() + " is not of types \"boolean\", \"object\"");
  }
  // Only the meta-schema rule clients trip over in practice is checked: properties is a map.
  if (schema.is_object() && schema.contains("properties") && !schema["properties"].is_object()) {
    return invalid_argument(prefix + schema["properties"].dump() + " is not of type \"object\"");
  }
  const Json type = schema.is_object() && schema.contains("type") ? schema["type"] : Json();
  if (type != "object") {
    return invalid_argument(prefix +
                            "schema must be a JSON Schema of 'type: \"object\"', got 'type: " +
                            dump_prompt_json(type, FloatStyle::kRust) + "'.");
  }
  return Status();
}

Status normalize_strict_schema(Json& schema) {
  if (!schema.is_object()) return Status();
  Json keys = Json::array();
  if (schema.contains("properties") && schema["properties"].is_object()) {
    for (const auto& [key, value] : schema["properties"].items()) keys.push_back(key);
  }
  if (schema.contains("required")) {
    std::set<std::string> want, have;
    for (const Json& k : keys) want.insert(k.get<std::string>());
    if (schema["required"].is_array()) {
      for (const Json& k : schema["required"]) {
        if (!k.is_string()) continue;
        if (!want.count(k.get<std::string>())) {
          return invalid_argument("Required property '" + k.get<std::string>() +
                                  "' not found in object");
        }
        have.insert(k.get<std::string>());
      }
    }
    if (want != have) {
      return invalid_argument("Required properties must match all properties in the object");
    }
  }
  schema["additionalProperties"] = false;
  if (!schema.contains("required")) schema["required"] = keys;
  return Status();
}

std::string string_or_empty(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Status check_tool_responses(const Json& messages) {
  auto role_of = [&](size_t i) { return string_or_empty(messages[i], "role"); };
  for (size_t i = 0; i < messages.size();) {
    const std::string role = role_of(i);
    if (role == "tool") {
      return invalid_argument(
          "Messages with role 'tool' must be a response to a preceding message "
          "with 'tool_calls'");
    }
    const Json& m = messages[i];
    if (role != "assistant" || !m.contains("tool_calls") || !m["tool_calls"].is_array()) {
      ++i;
      continue;
    }
    std::set<std::string> ids;
    for (const Json& c : m["tool_calls"]) ids.insert(string_or_empty(c, "id"));
    std::set<std::string> answered;
    size_t j = i + 1;
    for (; j < messages.size() && role_of(j) == "tool"; ++j) {
      const std::string id = string_or_empty(messages[j], "tool_call_id");
      if (!ids.count(id)) {
        return invalid_argument(
            "An assistant message with 'tool_calls' must be followed by tool "
            "messages responding to each 'tool_call_id', The following "
            "tool_call_ids did not have response messages: " +
            id);
      }
      if (!answered.insert(id).second) {
        return invalid_argument("Duplicate value for 'tool_call_id' of " + id + " in message[" +
                                std::to_string(j) + "]");
      }
    }
    if (answered.size() < ids.size()) {
      return invalid_argument(
          "An assistant message with 'tool_calls' must be followed by tool "
          "messages responding to each 'tool_call_id'. (insufficient tool "
          "messages following tool_calls message)");
    }
    i = j;
  }
  return Status();
}

bool contains_json_word(std::string_view s) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (size_t i = 0; i + 4 <= s.size(); ++i) {
    if (lower(s[i]) == 'j' && lower(s[i + 1]) == 's' && lower(s[i + 2]) == 'o' &&
        lower(s[i + 3]) == 'n') {
      return true;
    }
  }
  return false;
}

ThinkingInitialStage initial_stage(const Conversation& conv) {
  if (!conv.messages.empty()) {
    const Message& last = conv.messages.back();
    if (last.role == Role::kAssistant && last.prefix) {
      if (!last.content.empty()) return ThinkingInitialStage::kContentContinuation;
      if (last.reasoning && !last.reasoning->empty())
        return ThinkingInitialStage::kReasoningContinuation;
    }
  }
  return ThinkingInitialStage::kReasoningStart;
}

int error_status(const Status& status) {
  return status.code() == StatusCode::kInternal ? 500 : 400;
}

std::string error_body(const Status& status) {
  const char* type = error_status(status) == 500 ? "internal_error" : "invalid_request_error";
  std::string body = "{\"error\":{\"message\":\"";
  append_json_escaped(status.message(), body);
  body += "\",\"type\":\"";
  body += type;
  body += "\",\"param\":null,\"code\":\"";
  body += type;
  body += "\"}}";
  return body;
}

bool default_thinking(const ConversionOptions& options, ModelVersion version) {
  return version != ModelVersion::kChatTemplate && options.default_thinking_mode;
}

void finish_conversion(ConversationRequest& request, std::vector<std::string> stop_sequences) {
  Conversation& conv = request.conversation;
  ParsingOptions& po = request.parsing_options;
  po.parse_tool_calls = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  po.parse_json_output = conv.response_format == ResponseFormat::kJsonObject;
  po.stop_sequences = std::move(stop_sequences);
  if (request.model_version == ModelVersion::kChatTemplate) {
    // A chat template opens no tool-call block and (rendered without thinking) no reasoning.
    po.tool_call_format = ToolCallFormat::kTaggedJson;
    conv.thinking_mode = false;
    conv.reasoning_effort.reset();
    return;
  }
  po.starts_in_tool_calls = conv.tool_choice == ToolChoice::kRequired;
  if (conv.thinking_mode) po.thinking_initial_stage = initial_stage(conv);
}

}  // namespace deepinfer::recipe
