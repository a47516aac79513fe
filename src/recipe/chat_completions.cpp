// OpenAI Chat Completions -> ConversationRequest, with deepseek-recipe 0.2.0's validation and
// its exact 400 messages (recipe-spec.md §2.4; differences from the spec in docs/recipe.md).
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "recipe/protocol.h"
#include "recipe/protocol_common.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Status bad(std::string message) { return invalid_argument(std::move(message)); }

// "invalid request body: ..." stands for the reference's deserialization errors, whose wording
// (serde's) is not reproduced.

struct ThinkingChoice {
  bool thinking = true;
  std::optional<ReasoningEffort> effort;
};

Result<ThinkingChoice> resolve_thinking(const Json& req, bool default_thinking) {
  ThinkingChoice out;
  std::optional<std::string> effort_word;
  if (req.contains("reasoning_effort") && !req["reasoning_effort"].is_null()) {
    if (!req["reasoning_effort"].is_string()) return malformed("reasoning_effort must be a string");
    effort_word = req["reasoning_effort"].get<std::string>();
    if (!map_effort_word(*effort_word) && *effort_word != "none") {
      return malformed("unknown variant `" + *effort_word + "` for reasoning_effort");
    }
  }
  std::optional<bool> explicit_thinking;
  if (req.contains("thinking") && !req["thinking"].is_null()) {
    const Json& t = req["thinking"];
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string()) {
      return malformed("thinking must be an object with a type");
    }
    std::string type = t["type"].get<std::string>();
    if (type == "enabled" || type == "adaptive") {
      explicit_thinking = true;
    } else if (type == "disabled") {
      explicit_thinking = false;
    } else {
      return malformed("unknown variant `" + type + "` for thinking.type");
    }
  }
  if (explicit_thinking) {
    out.thinking = *explicit_thinking;
  } else if (effort_word) {
    out.thinking = *effort_word != "none";
  } else {
    out.thinking = default_thinking;
  }
  if (out.thinking) {
    out.effort = effort_word ? map_effort_word(*effort_word).value_or(ReasoningEffort::kHigh)
                             : ReasoningEffort::kHigh;
  }
  return out;
}

// Text of a content field: a string, or parts joined by "\n\n". Images become placeholders,
// or "[Unsupported Image]" for a model without vision (`images` null).
Result<std::string> content_text(const Json& content, size_t index, bool allow_images,
                                 std::vector<ImageSource>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return malformed("content should be a string or a list");
  std::string text;
  bool first = true;
  for (const Json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return malformed("content part must have a type");
    }
    const std::string type = part["type"].get<std::string>();
    std::string piece;
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        return malformed("text part needs text");
      piece = part["text"].get<std::string>();
    } else if (type == "image_url" && allow_images) {
      const Json& iu = part.contains("image_url") ? part["image_url"] : Json();
      if (!iu.is_object() || !iu.contains("url") || !iu["url"].is_string()) {
        return malformed("image_url must be an object with a url");
      }
      ImageSource src;
      src.location = iu["url"].get<std::string>();
      src.kind = src.location.rfind("data:", 0) == 0 ? ImageSource::Kind::kDataUrl
                                                     : ImageSource::Kind::kUrl;
      if (iu.contains("detail") && iu["detail"].is_string()) {
        auto d = parse_image_detail(iu["detail"].get<std::string>());
        if (!d) return malformed("unknown image detail");
        src.detail = *d;
      }
      if (images) {
        images->push_back(std::move(src));
        piece = kImageToken;
      } else {
        piece = "[Unsupported Image]";
      }
    } else if (type == "file" && allow_images) {
      return bad(".messages[" + std::to_string(index) + "]: file must have a file_id or file_data");
    } else {
      return malformed("unknown variant `" + type +
                       "`, expected one of `text`, `image_url`, `file`");
    }
    if (!first) text += "\n\n";
    first = false;
    text += piece;
  }
  return text;
}

Result<std::vector<ToolDefinition>> convert_tools(const Json& req) {
  std::vector<ToolDefinition> tools;
  if (!req.contains("tools") || req["tools"].is_null()) return tools;
  if (!req["tools"].is_array()) return malformed("tools must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < req["tools"].size(); ++i) {
    const Json& t = req["tools"][i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object()) {
      return malformed("unknown tool variant, expected `function`");
    }
    const Json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string()) return malformed("missing field `name`");
    ToolDefinition def;
    def.name = f["name"].get<std::string>();
    DI_RETURN_IF_ERROR(
        validate_tool_name(def.name, "tools[" + std::to_string(i) + "].function.name"));
    if (f.contains("description") && f["description"].is_string()) {
      def.description = f["description"].get<std::string>();
    }
    if (f.contains("strict") && f["strict"].is_boolean()) def.strict = f["strict"].get<bool>();
    // A tool without parameters takes none; only a given schema is checked.
    Json params = Json::object();
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      params = f["parameters"];
      DI_RETURN_IF_ERROR(validate_tool_schema(def.name, params));
    }
    if (def.strict.value_or(false)) DI_RETURN_IF_ERROR(normalize_strict_schema(params));
    def.parameters_json = params.dump();
    if (!names.insert(def.name).second) return bad("Tool names must be unique.");
    tools.push_back(std::move(def));
  }
  return tools;
}

Result<ConversationRequest> convert(const Json& req, const ConversionOptions& opts) {
  if (!req.is_object()) return malformed("expected an object");
  if (!req.contains("model") || !req["model"].is_string())
    return malformed("missing field `model`");
  if (!req.contains("messages")) return malformed("missing field `messages`");
  if (!req["messages"].is_array()) return malformed("messages must be a sequence");

  ConversationRequest out;
  out.model = req["model"].get<std::string>();
  DI_ASSIGN_OR_RETURN(out.model_version, resolve_model(out.model, opts));
  const Json& messages = req["messages"];
  if (messages.empty()) return bad("Empty input messages");

  DI_ASSIGN_OR_RETURN(ThinkingChoice tc, resolve_thinking(req, default_thinking(opts, out.model_version)));
  Conversation& conv = out.conversation;
  conv.thinking_mode = tc.thinking;
  conv.reasoning_effort = tc.effort;

  DI_RETURN_IF_ERROR(
      check_range(req, "temperature", 0, 2, false,
                  "Invalid temperature value, the valid range of temperature is [0, 2]"));
  DI_RETURN_IF_ERROR(check_range(req, "top_p", 0, 1, true,
                                 "Invalid top_p value, the valid range of top_p is (0, 1.0]"));
  const int64_t max_bound =
      tc.thinking ? opts.thinking_max_tokens_upper_bound : opts.non_thinking_max_tokens_upper_bound;
  if (req.contains("max_tokens") && !req["max_tokens"].is_null()) {
    if (!req["max_tokens"].is_number_integer()) return malformed("max_tokens must be an integer");
    int64_t v = req["max_tokens"].get<int64_t>();
    if (v < 1 || v > max_bound) {
      return bad("Invalid max_tokens value, the valid range of max_tokens is [1, " +
                 std::to_string(max_bound) + "]");
    }
    out.inference_options.max_tokens = v;
  }
  if (req.contains("n") && !req["n"].is_null() && req["n"] != 1) {
    return bad("Invalid n value (currently only n = 1 is supported)");
  }
  DI_RETURN_IF_ERROR(check_range(
      req, "presence_penalty", -2, 2, false,
      "Invalid presence_penalty value, the valid range of presence_penalty is [-2, 2]"));
  DI_RETURN_IF_ERROR(check_range(
      req, "frequency_penalty", -2, 2, false,
      "Invalid frequency_penalty value, the valid range of frequency_penalty is [-2, 2]"));
  if (req.contains("seed") && !req["seed"].is_null()) {
    if (!req["seed"].is_number_unsigned()) return malformed("seed must be a non-negative integer");
    if (req["seed"].get<uint64_t>() >= (uint64_t{1} << 63)) {
      return bad("Invalid seed value, the valid range of seed is [0, 2^63)");
    }
  }
  std::vector<std::string> stops;
  if (req.contains("stop") && !req["stop"].is_null()) {
    const Json& stop = req["stop"];
    if (stop.is_string()) {
      stops.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      if (stop.size() > 16)
        return bad("Stop string array too long: " + std::to_string(stop.size()));
      for (size_t i = 0; i < stop.size(); ++i) {
        if (!stop[i].is_string()) return malformed("expected a string or a list");
        if (stop[i].get<std::string>().empty()) {
          return bad("Invalid 'stop[" + std::to_string(i) +
                     "]': empty string. Expected a string with minimum length 1, but got an empty "
                     "string instead.");
        }
        stops.push_back(stop[i].get<std::string>());
      }
    } else {
      return malformed("expected a string or a list");
    }
  }
  out.stream = req.value("stream", false) == true;
  const bool has_stream_options =
      req.contains("stream_options") && !req["stream_options"].is_null();
  if (has_stream_options && !out.stream) {
    return bad("stream_options should be set along with stream = true");
  }
  out.include_usage = !out.stream || (has_stream_options && req["stream_options"].is_object() &&
                                      req["stream_options"].value("include_usage", false));
  if (req.contains("top_logprobs") && req["top_logprobs"].is_number_integer()) {
    int64_t v = req["top_logprobs"].get<int64_t>();
    if (v < 0 || v > 20) {
      return bad("Invalid top_logprobs value, the valid range of top_logprobs is [0, 20].");
    }
  }

  // Messages.
  const bool vision = out.model_version != ModelVersion::kDeepseekV4Pro;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& mj = messages[i];
    if (!mj.is_object() || !mj.contains("role") || !mj["role"].is_string()) {
      return malformed("message must have a role");
    }
    const std::string role_word = mj["role"].get<std::string>();
    auto role = parse_role(role_word);
    if (!role) {
      return malformed(
          "unknown variant `" + role_word +
          "`, expected one of `system`, `user`, `assistant`, `tool`, `latest_reminder`");
    }
    const bool has_content = mj.contains("content") && !mj["content"].is_null();
    if (mj.value("prefix", false) == true &&
        (*role != Role::kAssistant || i + 1 != messages.size())) {
      return bad(
          "Invalid completion message: prefix set true with message which is not final "
          "message or message role is not assistant");
    }
    Message m;
    m.role = *role;
    switch (*role) {
      case Role::kSystem: {
        if (!has_content) return malformed("content should be a string or a list");
        DI_ASSIGN_OR_RETURN(
            m.content, content_text(mj["content"], i, true, vision ? &m.image_sources : nullptr));
        if (m.content.empty()) continue;  // an empty system message says nothing
        break;
      }
      case Role::kUser:
      case Role::kLatestReminder: {
        if (!has_content) return malformed("content should be a string or a list");
        DI_ASSIGN_OR_RETURN(m.content, content_text(mj["content"], i, *role == Role::kUser,
                                                    vision ? &m.image_sources : nullptr));
        break;
      }
      case Role::kTool: {
        if (!has_content) return malformed("content should be a string or a list");
        DI_ASSIGN_OR_RETURN(
            m.content, content_text(mj["content"], i, true, vision ? &m.image_sources : nullptr));
        if (mj.contains("tool_call_id") && mj["tool_call_id"].is_string()) {
          m.tool_call_id = mj["tool_call_id"].get<std::string>();
        }
        break;
      }
      case Role::kAssistant: {
        const bool has_calls = mj.contains("tool_calls") && !mj["tool_calls"].is_null();
        if (!has_content && !has_calls) {
          return bad("Invalid assistant message: content or tool_calls must be set");
        }
        if (has_content) {
          DI_ASSIGN_OR_RETURN(m.content,
                              content_text(mj["content"], i, false, nullptr));  // text only
        }
        if (mj.contains("reasoning_content") && mj["reasoning_content"].is_string()) {
          m.reasoning = mj["reasoning_content"].get<std::string>();
        }
        m.prefix = mj.value("prefix", false) == true;
        if (has_calls) {
          const Json& calls = mj["tool_calls"];
          if (!calls.is_array()) return malformed("tool_calls must be a sequence");
          if (calls.empty()) {
            return bad("Invalid 'messages[" + std::to_string(i) +
                       "].tool_calls': empty array. Expected an array with minimum length 1, but "
                       "got an empty array instead.");
          }
          std::set<std::string> ids;
          for (const Json& cj : calls) {
            if (!cj.is_object() || !cj.contains("id") || !cj["id"].is_string() ||
                !cj.contains("function") || !cj["function"].is_object() ||
                !cj["function"].contains("name") || !cj["function"]["name"].is_string()) {
              return malformed("tool call needs id and function.name");
            }
            ToolCall call;
            call.id = cj["id"].get<std::string>();
            call.name = cj["function"]["name"].get<std::string>();
            const Json& args =
                cj["function"].contains("arguments") ? cj["function"]["arguments"] : Json();
            call.arguments = args.is_string() ? args.get<std::string>() : "";
            if (!ids.insert(call.id).second) {
              return bad("Duplicate value for 'tool_call_id' of " + call.id + " in message[" +
                         std::to_string(i) + "]");
            }
            m.tool_calls.push_back(std::move(call));
          }
        }
        break;
      }
    }
    conv.messages.push_back(std::move(m));
  }
  // Filled in only now because the reference fills after reading every message.
  if (conv.thinking_mode) {
    for (Message& m : conv.messages) {
      if (m.role == Role::kAssistant && !m.reasoning) m.reasoning = "";
    }
  }

  DI_RETURN_IF_ERROR(check_tool_responses(messages));

  // Tools and tool choice.
  DI_ASSIGN_OR_RETURN(conv.tools, convert_tools(req));
  if (req.contains("tool_choice") && !req["tool_choice"].is_null()) {
    const Json& choice = req["tool_choice"];
    if (choice.is_string()) {
      auto c = parse_tool_choice(choice.get<std::string>());
      if (!c) return malformed("expected one of `none`, `auto`, `required` or a tool");
      conv.tool_choice = *c;
    } else if (choice.is_object() && choice.contains("function") &&
               choice["function"].is_object() && choice["function"].contains("name") &&
               choice["function"]["name"].is_string()) {
      const std::string name = choice["function"]["name"].get<std::string>();
      std::vector<ToolDefinition> kept;
      for (const ToolDefinition& t : conv.tools) {
        if (t.name == name) kept.push_back(t);
      }
      if (kept.empty()) {
        return bad("Invalid value for 'tool_call': no function named '" + name +
                   "' was specified in the 'tools' parameter.");
      }
      conv.tools = std::move(kept);
      conv.tool_choice = ToolChoice::kRequired;
    } else {
      return malformed("expected one of `none`, `auto`, `required` or a tool");
    }
  }
  if (conv.tool_choice == ToolChoice::kNone) conv.tools.clear();
  if (conv.tools.empty() && conv.tool_choice == ToolChoice::kRequired)
    conv.tool_choice = ToolChoice::kAuto;
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }

  // Response format.
  if (req.contains("response_format") && !req["response_format"].is_null()) {
    const Json& rf = req["response_format"];
    std::string type = rf.is_object() ? rf.value("type", "") : "";
    if (type == "json_object") {
      bool found = false;
      for (const Message& m : conv.messages) found = found || contains_json_word(m.content);
      if (!found) {
        return bad(
            "Prompt must contain the word 'json' in some form to use 'response_format' of "
            "type 'json_object'.");
      }
      conv.response_format = ResponseFormat::kJsonObject;
    } else if (type != "text" && type != "json_schema" && type != "regex") {
      return malformed("unknown variant `" + type +
                       "`, expected one of `json_object`, `json_schema`, `regex`, `text`");
    }
  }

  // Sampling settings the backend gets.
  InferenceOptions& inf = out.inference_options;
  inf.temperature = 1.0;
  if (!conv.thinking_mode && req.contains("temperature") && req["temperature"].is_number()) {
    inf.temperature = req["temperature"].get<double>();
  }
  inf.top_p = req.contains("top_p") && req["top_p"].is_number() ? req["top_p"].get<double>() : 1.0;

  finish_conversion(out, std::move(stops));
  return out;
}

}  // namespace

Result<ConversationRequest> convert_chat_completions(std::string_view body,
                                                     const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
