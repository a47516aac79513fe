// Anthropic Messages -> ConversationRequest, with deepseek-recipe 0.2.0's validation and its
// exact 400 messages (recipe-spec.md §2.5; differences from the spec in docs/recipe.md).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "recipe/prompt_json.h"
#include "recipe/protocol.h"
#include "recipe/output_format.h"
#include "recipe/protocol_common.h"
#include "recipe/request_fields.h"

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

// The type of a content block (`where` names it): a block is an object with a string type.
Result<std::string> block_type(const Json& block, const std::string& where) {
  if (!block.is_object()) return type_error(where, "an object", block);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> type, FieldReader(block, where).string("type"));
  if (!type) return malformed("missing field `" + where + ".type`");
  return std::move(*type);
}

// Text of a string or of text blocks joined by "\n\n" (`where` names the field).
Result<std::string> block_text(const Json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return type_error(where, "a string or an array of text blocks", content);
  std::string text;
  bool first = true;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& b = content[j];
    const std::string block = where + "." + std::to_string(j);
    DI_ASSIGN_OR_RETURN(std::string type, block_type(b, block));
    if (type != "text") return malformed("expected text blocks in " + where);
    if (!b.contains("text") || !b["text"].is_string()) {
      return type_error(block + ".text", "a string", b.contains("text") ? b["text"] : Json());
    }
    if (!first) text += "\n\n";
    first = false;
    text += b["text"].get<std::string>();
  }
  return text;
}

Result<ImageSource> image_source(const Json& block, const std::string& where) {
  DI_ASSIGN_OR_RETURN(const Json* source, FieldReader(block, where).object("source"));
  if (source == nullptr) return malformed("missing field `" + where + ".source`");
  const FieldReader src(*source, where + ".source");
  DI_ASSIGN_OR_RETURN(const std::string type, src.string_or("type", ""));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> url, src.string("url"));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> data, src.string("data"));
  DI_ASSIGN_OR_RETURN(const std::string media_type, src.string_or("media_type", ""));
  ImageSource s;
  if (type == "url" && url) {
    s.kind = ImageSource::Kind::kUrl;
    s.location = std::move(*url);
  } else if (type == "base64" && data) {
    s.kind = ImageSource::Kind::kDataUrl;
    s.location = "data:" + media_type + ";base64," + *data;
  } else {
    return malformed("unsupported image source in " + where);
  }
  return s;
}

Result<std::vector<ToolDefinition>> convert_tools(const Json& req, const ConversionOptions& opts) {
  std::vector<ToolDefinition> tools;
  if (!req.contains("tools") || req["tools"].is_null()) return tools;
  if (!req["tools"].is_array()) return type_error("tools", "an array", req["tools"]);
  std::set<std::string> names;
  for (size_t i = 0; i < req["tools"].size(); ++i) {
    const Json& t = req["tools"][i];
    const std::string where = "tools." + std::to_string(i);
    if (!t.is_object()) return type_error(where, "an object", t);
    const FieldReader tr(t, where);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type_field, tr.string("type"));
    const std::string type = type_field.value_or("custom");
    if (type != "custom") {
      const bool web_search = type.rfind("web_search", 0) == 0;
      if (web_search && opts.messages_web_search == WebSearchBehavior::kDrop) continue;
      return bad("tools[" + std::to_string(i) + "]: server tools are not supported");
    }
    if (!t.contains("name") || !t["name"].is_string()) return malformed("missing field `name`");
    ToolDefinition def;
    def.name = t["name"].get<std::string>();
    DI_RETURN_IF_ERROR(validate_tool_name(def.name, "tools[" + std::to_string(i) + "].name"));
    DI_ASSIGN_OR_RETURN(def.description, tr.string("description"));
    const Json schema = t.contains("input_schema") ? t["input_schema"] : Json();
    DI_RETURN_IF_ERROR(validate_tool_schema(def.name, schema));
    def.parameters_json = schema.dump();
    if (!names.insert(def.name).second) return bad("Tool names must be unique.");
    tools.push_back(std::move(def));
  }
  return tools;
}

// Structured outputs: `output_config.format`, or the beta's `output_format`; both
// {"type": "json_schema", "schema": {...}}.
Result<Constraint> convert_output_format(const FieldReader& f, const Json* output_config) {
  const Json* format = nullptr;
  std::string path = "output_format";
  if (output_config != nullptr) {
    DI_ASSIGN_OR_RETURN(format, FieldReader(*output_config, "output_config").object("format"));
    path = "output_config.format";
  }
  DI_ASSIGN_OR_RETURN(const Json* beta_format, f.object("output_format"));
  if (format != nullptr && beta_format != nullptr) {
    return bad("output_format: give either output_format or output_config.format, not both");
  }
  if (format == nullptr) {
    format = beta_format;
    path = "output_format";
  }
  if (format == nullptr) return Constraint{};
  const FieldReader r(*format, path);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> type, r.string("type"));
  if (type.value_or("") != "json_schema") {
    return bad(r.path("type") + ": Input should be 'json_schema'");
  }
  const Json* schema = r.find("schema");
  if (schema == nullptr) return bad(r.path("schema") + ": Field required");
  return json_schema_constraint(*schema, r.path("schema"));
}

Result<ConversationRequest> convert(const Json& req, const ConversionOptions& opts) {
  if (!req.is_object()) return malformed("expected an object");
  const FieldReader f(req);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> model, f.string("model"));
  if (!model) return malformed("missing field `model`");
  DI_ASSIGN_OR_RETURN(const Json* messages_field, f.array("messages"));
  if (messages_field == nullptr) return malformed("missing field `messages`");
  ConversationRequest out;
  out.model = std::move(*model);
  DI_ASSIGN_OR_RETURN(out.model_version, resolve_model(out.model, opts));
  const Json& messages = *messages_field;
  if (messages.empty()) return bad("messages: at least one message is required");
  Conversation& conv = out.conversation;

  // Thinking: thinking.type, else an output_config.effort switches it on, else the default.
  std::optional<std::string> effort_word;
  DI_ASSIGN_OR_RETURN(const Json* output_config, f.object("output_config"));
  if (output_config != nullptr) {
    DI_ASSIGN_OR_RETURN(effort_word, FieldReader(*output_config, "output_config").string("effort"));
    if (effort_word && !map_effort_word(*effort_word)) {
      return malformed("unknown effort `" + *effort_word + "`");
    }
  }
  conv.thinking_mode = effort_word ? true : default_thinking(opts, out.model_version);
  DI_ASSIGN_OR_RETURN(out.inference_options.constraint, convert_output_format(f, output_config));
  DI_ASSIGN_OR_RETURN(const Json* thinking, f.object("thinking"));
  if (thinking != nullptr) {
    const FieldReader t(*thinking, "thinking");
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type_field, t.string("type"));
    const std::string type = type_field.value_or("");
    if (type == "enabled" || type == "adaptive") {
      conv.thinking_mode = true;
    } else if (type == "disabled") {
      conv.thinking_mode = false;
    } else {
      return malformed("unknown variant `" + type + "` for thinking.type");
    }
    // Anthropic's minimum; the budget is carried, not enforced (docs/server.md).
    DI_ASSIGN_OR_RETURN(out.inference_options.thinking_budget_tokens,
                        t.integer({"budget_tokens", 1024, INT64_MAX}));
  }
  if (conv.thinking_mode) {
    conv.reasoning_effort = effort_word ? *map_effort_word(*effort_word) : ReasoningEffort::kHigh;
  }

  DI_ASSIGN_OR_RETURN(std::optional<double> temperature, f.number(kTemperatureSpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> top_p, f.number(kTopPSpec));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, f.integer({"max_tokens", 1, INT64_MAX}));
  if (max_tokens) {
    // Messages lowers an excessive max_tokens to the bound instead of rejecting it.
    const int64_t bound = conv.thinking_mode ? opts.thinking_max_tokens_upper_bound
                                             : opts.non_thinking_max_tokens_upper_bound;
    out.inference_options.max_tokens = std::min(*max_tokens, bound);
  } else if (opts.messages_require_max_tokens) {
    return bad("max_tokens: Field required");
  }
  std::vector<std::string> stops;
  DI_ASSIGN_OR_RETURN(const Json* stop_sequences, f.array("stop_sequences"));
  if (stop_sequences != nullptr) {
    const Json& s = *stop_sequences;
    if (s.size() > 16) return bad("Stop string array too long: " + std::to_string(s.size()));
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_string()) return type_error("stop_sequences." + std::to_string(i), "a string", s[i]);
      if (s[i].get<std::string>().empty()) {
        return bad("Invalid 'stop[" + std::to_string(i) +
                   "]': empty string. Expected a string with minimum length 1, but got an empty "
                   "string instead.");
      }
      stops.push_back(s[i].get<std::string>());
    }
  }
  DI_ASSIGN_OR_RETURN(std::optional<bool> stream, f.boolean("stream"));
  out.stream = stream.value_or(false);
  DI_ASSIGN_OR_RETURN(const Json* metadata, f.object("metadata"));
  if (metadata != nullptr) DI_RETURN_IF_ERROR(FieldReader(*metadata, "metadata").string("user_id").status());

  // The top-level system prompt.
  if (req.contains("system") && !req["system"].is_null()) {
    DI_ASSIGN_OR_RETURN(std::string system, block_text(req["system"], "system"));
    // Kept even when empty ("" or []), as 0.2.0 does: V4.1 then still writes <｜System｜>.
    conv.messages.push_back(Message::system(system));
  }

  std::vector<std::string> pending;  // tool_use ids the next user message must answer
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& mj = messages[i];
    const std::string where = "messages." + std::to_string(i);
    if (!mj.is_object()) return type_error(where, "an object", mj);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> role_field, FieldReader(mj, where).string("role"));
    if (!role_field) return malformed("missing field `" + where + ".role`");
    const std::string role = std::move(*role_field);
    const Json content = mj.contains("content") ? mj["content"] : Json();
    if (role != "user" && !pending.empty()) return missing_results(where, pending);
    if (role == "system") {
      DI_ASSIGN_OR_RETURN(std::string text, block_text(content, where + ".content"));
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
      if (!content.is_array()) return type_error(where + ".content", "a string or an array of blocks", content);
      // As 0.2.0: an empty list is refused (an empty string is a valid, empty turn).
      if (content.empty()) return bad(where + ": all messages must have non-empty content");
      std::set<std::string> answered;
      for (size_t j = 0; j < content.size(); ++j) {
        const Json& b = content[j];
        const std::string block = where + ".content." + std::to_string(j);
        DI_ASSIGN_OR_RETURN(const std::string type, block_type(b, block));
        if (type == "tool_result") {
          DI_ASSIGN_OR_RETURN(std::optional<std::string> id_field,
                              FieldReader(b, block).string("tool_use_id"));
          const std::string id = id_field.value_or("");
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
                              block_text(b.contains("content") ? b["content"] : Json(), block + ".content"));
          conv.messages.push_back(Message::tool(text, id));
          continue;
        }
        if (!pending.empty()) return missing_results(where, pending);
        if (type == "text") {
          if (!b.contains("text") || !b["text"].is_string())
            return type_error(block + ".text", "a string", b.contains("text") ? b["text"] : Json());
          conv.messages.push_back(Message::user(b["text"].get<std::string>()));
        } else if (type == "image") {
          DI_ASSIGN_OR_RETURN(ImageSource src, image_source(b, block));
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
          const std::string block = where + ".content." + std::to_string(j);
          DI_ASSIGN_OR_RETURN(const std::string type, block_type(b, block));
          if (type == "text") {
            if (!pending.empty()) return missing_results(where + "." + std::to_string(j), pending);
            if (!b.contains("text") || !b["text"].is_string())
              return type_error(block + ".text", "a string", b.contains("text") ? b["text"] : Json());
            if (text_started) m.content += "\n\n";
            text_started = true;
            m.content += b["text"].get<std::string>();
          } else if (type == "thinking") {
            DI_ASSIGN_OR_RETURN(std::optional<std::string> thought,
                                FieldReader(b, block).string("thinking"));
            const std::string t = thought.value_or("");
            m.reasoning = m.reasoning ? *m.reasoning + "\n\n" + t : t;
          } else if (type == "tool_use") {
            if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
                !b["name"].is_string()) {
              return malformed(block + ": a tool_use block needs a string id and name");
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
  DI_ASSIGN_OR_RETURN(const Json* tool_choice, f.object("tool_choice"));
  if (tool_choice != nullptr) {
    const FieldReader choice(*tool_choice, "tool_choice");
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type_field, choice.string("type"));
    const std::string type = type_field.value_or("");
    DI_ASSIGN_OR_RETURN(std::optional<bool> no_parallel, choice.boolean("disable_parallel_tool_use"));
    out.inference_options.disable_parallel_tool_use = no_parallel.value_or(false);
    if (type == "none") {
      conv.tools.clear();
      conv.tool_choice = ToolChoice::kNone;
    } else if (type == "tool") {
      DI_ASSIGN_OR_RETURN(std::optional<std::string> name_field, choice.string("name"));
      const std::string name = name_field.value_or("");
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
    } else if (type == "any") {
      // The prompt stays Auto's, as deepseek-recipe 0.2.0 renders it; the server's grammar
      // makes the answer a call.
      out.inference_options.must_call_tool = !conv.tools.empty();
    } else if (type != "auto") {
      return malformed("unknown tool_choice `" + type + "`");
    }
  }
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }

  InferenceOptions& inf = out.inference_options;
  inf.temperature = !conv.thinking_mode && temperature ? *temperature : 1.0;
  inf.top_p = top_p.value_or(1.0);

  finish_conversion(out, std::move(stops));
  return out;
}

}  // namespace

Result<ConversationRequest> convert_messages(std::string_view body,
                                             const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
