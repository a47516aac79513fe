// Anthropic Messages -> ConversationRequest, with deepseek-recipe 0.2.0's validation and its
// exact 400 messages (recipe-spec.md §2.5; differences from the spec in docs/recipe.md).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "recipe/prompt_json.h"
#include "recipe/protocol.h"
#include "recipe/protocol_common.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Status bad(std::string message) { return invalid_argument(std::move(message)); }

std::string joined_ids(const std::vector<std::string>& ids) {
  std::string s;
  for (const std::string& id : ids) s += (s.empty() ? "" : ", ") + id;
  return s;
}

Status missing_results(const std::string& where, const std::vector<std::string>& pending) {
  return bad(where +
             ": `tool_use` ids were found without `tool_result` blocks immediately after: " +
             joined_ids(pending) +
             ". Each `tool_use` block must have a corresponding `tool_result` block in the next "
             "message.");
}

// Text of a string or of text blocks joined by "\n\n".
Result<std::string> block_text(const Json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return malformed("content should be a string or a list of blocks");
  std::string text;
  bool first = true;
  for (const Json& b : content) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") ||
        !b["text"].is_string()) {
      return malformed("expected text blocks");
    }
    if (!first) text += "\n\n";
    first = false;
    text += b["text"].get<std::string>();
  }
  return text;
}

Result<ImageSource> image_source(const Json& block) {
  const Json& src = block.contains("source") ? block["source"] : Json();
  if (!src.is_object()) return malformed("image block needs a source");
  ImageSource s;
  const std::string type = src.value("type", "");
  if (type == "url" && src.contains("url") && src["url"].is_string()) {
    s.kind = ImageSource::Kind::kUrl;
    s.location = src["url"].get<std::string>();
  } else if (type == "base64" && src.contains("data") && src["data"].is_string()) {
    s.kind = ImageSource::Kind::kDataUrl;
    s.location =
        "data:" + src.value("media_type", "") + ";base64," + src["data"].get<std::string>();
  } else {
    return malformed("unsupported image source");
  }
  return s;
}

Result<std::vector<ToolDefinition>> convert_tools(const Json& req, const ConversionOptions& opts) {
  std::vector<ToolDefinition> tools;
  if (!req.contains("tools") || req["tools"].is_null()) return tools;
  if (!req["tools"].is_array()) return malformed("tools must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < req["tools"].size(); ++i) {
    const Json& t = req["tools"][i];
    if (!t.is_object()) return malformed("tool must be an object");
    const std::string type = t.value("type", "custom");
    if (type != "custom") {
      const bool web_search = type.rfind("web_search", 0) == 0;
      if (web_search && opts.messages_web_search == WebSearchBehavior::kDrop) continue;
      return bad("tools[" + std::to_string(i) + "]: server tools are not supported");
    }
    if (!t.contains("name") || !t["name"].is_string()) return malformed("missing field `name`");
    ToolDefinition def;
    def.name = t["name"].get<std::string>();
    DI_RETURN_IF_ERROR(validate_tool_name(def.name, "tools[" + std::to_string(i) + "].name"));
    if (t.contains("description") && t["description"].is_string()) {
      def.description = t["description"].get<std::string>();
    }
    const Json schema = t.contains("input_schema") ? t["input_schema"] : Json();
    DI_RETURN_IF_ERROR(validate_tool_schema(def.name, schema));
    def.parameters_json = schema.dump();
    if (!names.insert(def.name).second) return bad("Tool names must be unique.");
    tools.push_back(std::move(def));
  }
  return tools;
}

Result<ConversationRequest> convert(const Json& req, const ConversionOptions& opts) {
  if (!req.is_object()) return malformed("expected an object");
  if (!req.contains("model") || !req["model"].is_string())
    return malformed("missing field `model`");
  if (!req.contains("messages") || !req["messages"].is_array())
    return malformed("missing field `messages`");
  ConversationRequest out;
  out.model = req["model"].get<std::string>();
  DI_ASSIGN_OR_RETURN(out.model_version, resolve_model(out.model, opts));
  const Json& messages = req["messages"];
  if (messages.empty()) return bad("messages: at least one message is required");
  Conversation& conv = out.conversation;

  // Thinking: thinking.type, else an output_config.effort switches it on, else the default.
  std::optional<std::string> effort_word;
  if (req.contains("output_config") && req["output_config"].is_object() &&
      req["output_config"].contains("effort") && req["output_config"]["effort"].is_string()) {
    effort_word = req["output_config"]["effort"].get<std::string>();
    if (!map_effort_word(*effort_word)) return malformed("unknown effort `" + *effort_word + "`");
  }
  conv.thinking_mode = effort_word ? true : default_thinking(opts, out.model_version);
  if (req.contains("thinking") && req["thinking"].is_object()) {
    const std::string type = req["thinking"].value("type", "");
    if (type == "enabled" || type == "adaptive") {
      conv.thinking_mode = true;
    } else if (type == "disabled") {
      conv.thinking_mode = false;
    } else {
      return malformed("unknown variant `" + type + "` for thinking.type");
    }
    if (req["thinking"].contains("budget_tokens") &&
        req["thinking"]["budget_tokens"].is_number_integer()) {
      out.inference_options.thinking_budget_tokens =
          req["thinking"]["budget_tokens"].get<int64_t>();
    }
  }
  if (conv.thinking_mode) {
    conv.reasoning_effort = effort_word ? *map_effort_word(*effort_word) : ReasoningEffort::kHigh;
  }

  DI_RETURN_IF_ERROR(
      check_range(req, "temperature", 0, 2, false,
                  "Invalid temperature value, the valid range of temperature is [0, 2]"));
  DI_RETURN_IF_ERROR(check_range(req, "top_p", 0, 1, true,
                                 "Invalid top_p value, the valid range of top_p is (0, 1.0]"));
  if (req.contains("max_tokens") && req["max_tokens"].is_number_integer()) {
    // Messages lowers an excessive max_tokens to the bound instead of rejecting it.
    const int64_t bound = conv.thinking_mode ? opts.thinking_max_tokens_upper_bound
                                             : opts.non_thinking_max_tokens_upper_bound;
    out.inference_options.max_tokens = std::min(req["max_tokens"].get<int64_t>(), bound);
  }
  std::vector<std::string> stops;
  if (req.contains("stop_sequences") && req["stop_sequences"].is_array()) {
    const Json& s = req["stop_sequences"];
    if (s.size() > 16) return bad("Stop string array too long: " + std::to_string(s.size()));
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_string()) return malformed("stop_sequences must be strings");
      if (s[i].get<std::string>().empty()) {
        return bad("Invalid 'stop[" + std::to_string(i) +
                   "]': empty string. Expected a string with minimum length 1, but got an empty "
                   "string instead.");
      }
      stops.push_back(s[i].get<std::string>());
    }
  }
  out.stream = req.value("stream", false) == true;

  // The top-level system prompt.
  if (req.contains("system") && !req["system"].is_null()) {
    DI_ASSIGN_OR_RETURN(std::string system, block_text(req["system"]));
    // Kept even when empty ("" or []), as 0.2.0 does: V4.1 then still writes <｜System｜>.
    conv.messages.push_back(Message::system(system));
  }

  std::vector<std::string> pending;  // tool_use ids the next user message must answer
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& mj = messages[i];
    if (!mj.is_object() || !mj.contains("role") || !mj["role"].is_string()) {
      return malformed("message must have a role");
    }
    const std::string role = mj["role"].get<std::string>();
    const std::string where = "messages." + std::to_string(i);
    const Json content = mj.contains("content") ? mj["content"] : Json();
    if (role != "user" && !pending.empty()) return missing_results(where, pending);
    if (role == "system") {
      DI_ASSIGN_OR_RETURN(std::string text, block_text(content));
      // V4 has no place for a system turn mid-conversation: it reaches the model as a reminder.
      if (out.model_version == ModelVersion::kDeepseekV4Pro) {
        conv.messages.push_back(
            Message::user("<system-reminder>\n" + text + "\n</system-reminder>"));
      } else {
        conv.messages.push_back(Message::system(text));
      }
    } else if (role == "user") {
      if (content.is_string()) {
        if (!pending.empty()) return missing_results(where, pending);
        conv.messages.push_back(Message::user(content.get<std::string>()));
        continue;
      }
      if (!content.is_array()) return malformed("content should be a string or a list of blocks");
      // As 0.2.0: an empty list is refused (an empty string is a valid, empty turn).
      if (content.empty()) return bad(where + ": all messages must have non-empty content");
      std::set<std::string> answered;
      for (size_t j = 0; j < content.size(); ++j) {
        const Json& b = content[j];
        const std::string type = b.is_object() ? b.value("type", "") : "";
        if (type == "tool_result") {
          const std::string id = b.value("tool_use_id", "");
          if (answered.count(id)) {
            return bad(where + ".content." + std::to_string(j) +
                       ": each tool_use must have a single result. Found multiple `tool_result` "
                       "blocks with id: " +
                       id);
          }
          auto it = std::find(pending.begin(), pending.end(), id);
          if (it == pending.end()) {
            return bad("unexpected `" + where + ".content." + std::to_string(j) +
                       ": tool_use_id` found in `tool_result` blocks: " + id +
                       ". Each `tool_result` block must have a corresponding `tool_use` block in "
                       "the previous message.");
          }
          pending.erase(it);
          answered.insert(id);
          DI_ASSIGN_OR_RETURN(std::string text,
                              block_text(b.contains("content") ? b["content"] : Json()));
          conv.messages.push_back(Message::tool(text, id));
          continue;
        }
        if (!pending.empty()) return missing_results(where, pending);
        if (type == "text") {
          if (!b.contains("text") || !b["text"].is_string())
            return malformed("text block needs text");
          conv.messages.push_back(Message::user(b["text"].get<std::string>()));
        } else if (type == "image") {
          DI_ASSIGN_OR_RETURN(ImageSource src, image_source(b));
          if (out.model_version == ModelVersion::kDeepseekV4Pro) {
            conv.messages.push_back(Message::user("[Unsupported Image]"));  // V4 has no vision
          } else {
            conv.messages.push_back(Message::user(kImageToken, {src}));
          }
        } else if (type == "document") {
          std::string media = "unknown";
          if (b.contains("source") && b["source"].is_object() &&
              b["source"].contains("media_type") && b["source"]["media_type"].is_string()) {
            media = b["source"]["media_type"].get<std::string>();
          }
          conv.messages.push_back(Message::user("[Unsupported document type: " + media + "]"));
        } else if (type == "tool_use") {
          return bad(where + ": `tool_use` blocks can only be in `assistant` messages");
        } else {
          return malformed("unsupported block `" + type + "` in a user message");
        }
      }
      if (!pending.empty()) return missing_results(where, pending);
    } else if (role == "assistant") {
      Message m = Message::assistant("");
      if (content.is_string()) {
        m.content = content.get<std::string>();
      } else if (content.is_array()) {
        if (content.empty()) return bad(where + ": all messages must have non-empty content");
        bool text_started = false;
        for (size_t j = 0; j < content.size(); ++j) {
          const Json& b = content[j];
          const std::string type = b.is_object() ? b.value("type", "") : "";
          if (type == "text") {
            if (!pending.empty()) return missing_results(where + "." + std::to_string(j), pending);
            if (!b.contains("text") || !b["text"].is_string())
              return malformed("text block needs text");
            if (text_started) m.content += "\n\n";
            text_started = true;
            m.content += b["text"].get<std::string>();
          } else if (type == "thinking") {
            const std::string t = b.value("thinking", "");
            m.reasoning = m.reasoning ? *m.reasoning + "\n\n" + t : t;
          } else if (type == "tool_use") {
            if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
                !b["name"].is_string()) {
              return malformed("tool_use needs id and name");
            }
            ToolCall call;
            call.id = b["id"].get<std::string>();
            call.name = b["name"].get<std::string>();
            call.arguments = dump_prompt_json(b.contains("input") ? b["input"] : Json::object(),
                                              FloatStyle::kRustPlus);
            pending.push_back(call.id);
            m.tool_calls.push_back(std::move(call));
          } else {
            return malformed("unsupported block `" + type + "` in an assistant message");
          }
        }
      } else {
        return bad(where + ": all messages must have non-empty content");
      }
      if (conv.thinking_mode && !m.reasoning) m.reasoning = "";
      conv.messages.push_back(std::move(m));
    } else {
      return malformed("unknown role `" + role + "`");
    }
  }
  if (!pending.empty())
    return missing_results("messages." + std::to_string(messages.size()), pending);

  // Tools and tool choice.
  DI_ASSIGN_OR_RETURN(conv.tools, convert_tools(req, opts));
  if (req.contains("tool_choice") && req["tool_choice"].is_object()) {
    const Json& choice = req["tool_choice"];
    const std::string type = choice.value("type", "");
    out.inference_options.disable_parallel_tool_use =
        choice.value("disable_parallel_tool_use", false);
    if (type == "none") {
      conv.tools.clear();
      conv.tool_choice = ToolChoice::kNone;
    } else if (type == "tool") {
      const std::string name = choice.value("name", "");
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
    } else if (type != "auto" && type != "any") {  // "any" is not forced (0.2.0)
      return malformed("unknown tool_choice `" + type + "`");
    }
  }
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }

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

Result<ConversationRequest> convert_messages(std::string_view body,
                                             const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
