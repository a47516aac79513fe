// OpenAI Chat Completions -> ConversationRequest, with deepseek-recipe 0.2.0's validation and
// its exact 400 messages (recipe-spec.md §2.4; differences from the spec in docs/recipe.md).
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "recipe/protocol.h"
#include "recipe/output_format.h"
#include "recipe/protocol_common.h"
#include "recipe/request_fields.h"

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

Result<ThinkingChoice> resolve_thinking(const FieldReader& f, bool default_thinking) {
  ThinkingChoice out;
  DI_ASSIGN_OR_RETURN(std::optional<std::string> effort_word, f.string("reasoning_effort"));
  if (effort_word && !map_effort_word(*effort_word) && *effort_word != "none") {
    return malformed("unknown variant `" + *effort_word + "` for reasoning_effort");
  }
  std::optional<bool> explicit_thinking;
  DI_ASSIGN_OR_RETURN(const Json* thinking, f.object("thinking"));
  if (thinking != nullptr) {
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type, FieldReader(*thinking, "thinking").string("type"));
    if (!type) return malformed("missing field `thinking.type`");
    if (*type == "enabled" || *type == "adaptive") {
      explicit_thinking = true;
    } else if (*type == "disabled") {
      explicit_thinking = false;
    } else {
      return malformed("unknown variant `" + *type + "` for thinking.type");
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

// Text of a content field (`path` names it): a string, or parts joined by "\n\n". Images
// become placeholders, or "[Unsupported Image]" for a model without vision (`images` null).
Result<std::string> content_text(const Json& content, const std::string& path, size_t index,
                                 bool allow_images, std::vector<ImageSource>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return type_error(path, "a string or an array of content parts", content);
  std::string text;
  bool first = true;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string part_path = path + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return type_error(part_path, "an object", part);
    const FieldReader p(part, part_path);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type, p.string("type"));
    if (!type) return malformed("missing field `" + p.path("type") + "`");
    std::string piece;
    if (*type == "text") {
      DI_ASSIGN_OR_RETURN(std::optional<std::string> t, p.string("text"));
      if (!t) return malformed("missing field `" + p.path("text") + "`");
      piece = std::move(*t);
    } else if (*type == "image_url" && allow_images) {
      DI_ASSIGN_OR_RETURN(const Json* iu, p.object("image_url"));
      if (iu == nullptr) return malformed("missing field `" + p.path("image_url") + "`");
      const FieldReader u(*iu, p.path("image_url"));
      DI_ASSIGN_OR_RETURN(std::optional<std::string> url, u.string("url"));
      if (!url) return malformed("missing field `" + u.path("url") + "`");
      ImageSource src;
      src.location = std::move(*url);
      src.kind = src.location.rfind("data:", 0) == 0 ? ImageSource::Kind::kDataUrl
                                                     : ImageSource::Kind::kUrl;
      DI_ASSIGN_OR_RETURN(std::optional<std::string> detail, u.string("detail"));
      if (detail) {
        auto d = parse_image_detail(*detail);
        if (!d) return malformed("unknown variant `" + *detail + "` for " + u.path("detail"));
        src.detail = *d;
      }
      if (images) {
        images->push_back(std::move(src));
        piece = kImageToken;
      } else {
        piece = "[Unsupported Image]";
      }
    } else if (*type == "file" && allow_images) {
      return bad(".messages[" + std::to_string(index) + "]: file must have a file_id or file_data");
    } else {
      return malformed("unknown variant `" + *type +
                       "`, expected one of `text`, `image_url`, `file`");
    }
    if (!first) text += "\n\n";
    first = false;
    text += piece;
  }
  return text;
}

Result<std::vector<ToolDefinition>> convert_tools(const FieldReader& f) {
  std::vector<ToolDefinition> tools;
  DI_ASSIGN_OR_RETURN(const Json* list, f.array("tools"));
  if (list == nullptr) return tools;
  std::set<std::string> names;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& t = (*list)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return type_error(where, "an object", t);
    const FieldReader tr(t, where);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> type, tr.string("type"));
    DI_ASSIGN_OR_RETURN(const Json* fn, tr.object("function"));
    if (type != "function" || fn == nullptr) return malformed("unknown tool variant, expected `function`");
    const FieldReader fr(*fn, where + ".function");
    DI_ASSIGN_OR_RETURN(std::optional<std::string> name, fr.string("name"));
    if (!name) return malformed("missing field `name`");
    ToolDefinition def;
    def.name = std::move(*name);
    DI_RETURN_IF_ERROR(validate_tool_name(def.name, fr.path("name")));
    DI_ASSIGN_OR_RETURN(def.description, fr.string("description"));
    DI_ASSIGN_OR_RETURN(def.strict, fr.boolean("strict"));
    // A tool without parameters takes none; only a given schema is checked.
    Json params = Json::object();
    if (const Json* given = fr.find("parameters")) {
      params = *given;
      DI_RETURN_IF_ERROR(validate_tool_schema(def.name, params));
    }
    if (def.strict.value_or(false)) DI_RETURN_IF_ERROR(normalize_strict_schema(params));
    def.parameters_json = params.dump();
    if (!names.insert(def.name).second) return bad("Tool names must be unique.");
    tools.push_back(std::move(def));
  }
  return tools;
}

// The token limit: max_completion_tokens (what current OpenAI clients send) or the deprecated
// max_tokens, each in [1, bound]. OpenAI rejects a request that sets both, whatever the values
// ("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported."), and
// so does this.
Result<std::optional<int64_t>> read_max_tokens(const FieldReader& f, int64_t bound) {
  auto spec = [&](std::string_view key, std::string& message) {
    message = "Invalid " + std::string(key) + " value, the valid range of " + std::string(key) +
              " is [1, " + std::to_string(bound) + "]";
    return IntSpec{key, 1, bound, message};
  };
  std::string legacy_message, current_message;
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> legacy, f.integer(spec("max_tokens", legacy_message)));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> current,
                      f.integer(spec("max_completion_tokens", current_message)));
  if (legacy && current) {
    return bad("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.");
  }
  return current ? current : legacy;
}

Result<std::vector<std::string>> read_stop(const FieldReader& f) {
  std::vector<std::string> stops;
  const Json* stop = f.find("stop");
  if (stop == nullptr) return stops;
  if (stop->is_string()) {
    stops.push_back(stop->get<std::string>());
    return stops;
  }
  if (!stop->is_array()) return type_error("stop", "a string or an array of strings", *stop);
  if (stop->size() > 16) return bad("Stop string array too long: " + std::to_string(stop->size()));
  for (size_t i = 0; i < stop->size(); ++i) {
    const Json& s = (*stop)[i];
    if (!s.is_string()) return type_error("stop[" + std::to_string(i) + "]", "a string", s);
    if (s.get<std::string>().empty()) {
      return bad("Invalid 'stop[" + std::to_string(i) +
                 "]': empty string. Expected a string with minimum length 1, but got an empty "
                 "string instead.");
    }
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

// The fields that only need their type and range checked here: the server reads the sampling
// knobs again (api_common.h), the rest are accepted and have no effect (docs/server.md).
Status check_passive_fields(const FieldReader& f) {
  DI_RETURN_IF_ERROR(f.integer({"n", 1, 1, "Invalid n value (currently only n = 1 is supported)"}).status());
  DI_RETURN_IF_ERROR(f.number(kPresencePenaltySpec).status());
  DI_RETURN_IF_ERROR(f.number(kFrequencyPenaltySpec).status());
  DI_RETURN_IF_ERROR(f.integer(kSeedSpec).status());
  DI_RETURN_IF_ERROR(f.integer(kTopLogprobsSpec).status());
  DI_RETURN_IF_ERROR(f.boolean("logprobs").status());
  DI_RETURN_IF_ERROR(f.boolean("parallel_tool_calls").status());
  DI_RETURN_IF_ERROR(f.string("user").status());
  return Status();
}

Result<Message> convert_tool_calls(const FieldReader& m, size_t i, Message msg) {
  DI_ASSIGN_OR_RETURN(const Json* calls, m.array("tool_calls"));
  if (calls == nullptr) return msg;
  if (calls->empty()) {
    return bad("Invalid 'messages[" + std::to_string(i) +
               "].tool_calls': empty array. Expected an array with minimum length 1, but got an "
               "empty array instead.");
  }
  std::set<std::string> ids;
  for (size_t k = 0; k < calls->size(); ++k) {
    const Json& cj = (*calls)[k];
    const std::string where = m.path("tool_calls") + "[" + std::to_string(k) + "]";
    if (!cj.is_object()) return type_error(where, "an object", cj);
    const FieldReader c(cj, where);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> id, c.string("id"));
    DI_ASSIGN_OR_RETURN(const Json* fn, c.object("function"));
    std::optional<std::string> name;
    if (fn != nullptr) {
      DI_ASSIGN_OR_RETURN(name, FieldReader(*fn, where + ".function").string("name"));
    }
    if (!id || !name) return malformed("tool call needs id and function.name");
    ToolCall call;
    call.id = std::move(*id);
    call.name = std::move(*name);
    DI_ASSIGN_OR_RETURN(std::optional<std::string> args,
                        FieldReader(*fn, where + ".function").string("arguments"));
    call.arguments = args.value_or("");
    if (!ids.insert(call.id).second) {
      return bad("Duplicate value for 'tool_call_id' of " + call.id + " in message[" +
                 std::to_string(i) + "]");
    }
    msg.tool_calls.push_back(std::move(call));
  }
  return msg;
}

// One message; nullopt for one that says nothing (an empty system message).
Result<std::optional<Message>> convert_message(const Json& mj, size_t i, size_t n_messages,
                                               bool vision) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!mj.is_object()) return type_error(where, "an object", mj);
  const FieldReader m(mj, where);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> role_word, m.string("role"));
  if (!role_word) return malformed("missing field `" + m.path("role") + "`");
  auto role = parse_role(*role_word);
  if (!role) {
    return malformed(
        "unknown variant `" + *role_word +
        "`, expected one of `system`, `user`, `assistant`, `tool`, `latest_reminder`");
  }
  const Json* content = m.find("content");
  DI_ASSIGN_OR_RETURN(std::optional<bool> prefix, m.boolean("prefix"));
  if (prefix.value_or(false) && (*role != Role::kAssistant || i + 1 != n_messages)) {
    return bad(
        "Invalid completion message: prefix set true with message which is not final "
        "message or message role is not assistant");
  }
  const std::string content_path = m.path("content");
  std::vector<ImageSource>* no_images = nullptr;
  Message msg;
  msg.role = *role;
  switch (*role) {
    case Role::kSystem:
    case Role::kUser:
    case Role::kLatestReminder:
    case Role::kTool: {
      if (content == nullptr) return malformed("missing field `" + content_path + "`");
      const bool images_allowed = *role != Role::kLatestReminder;
      DI_ASSIGN_OR_RETURN(msg.content, content_text(*content, content_path, i, images_allowed,
                                                    vision ? &msg.image_sources : no_images));
      if (*role == Role::kSystem && msg.content.empty()) return std::optional<Message>();
      if (*role == Role::kTool) {
        DI_ASSIGN_OR_RETURN(msg.tool_call_id, m.string("tool_call_id"));
      }
      break;
    }
    case Role::kAssistant: {
      if (content == nullptr && !m.has("tool_calls")) {
        return bad("Invalid assistant message: content or tool_calls must be set");
      }
      if (content != nullptr) {
        DI_ASSIGN_OR_RETURN(msg.content, content_text(*content, content_path, i, false, nullptr));
      }
      DI_ASSIGN_OR_RETURN(msg.reasoning, m.string("reasoning_content"));
      msg.prefix = prefix.value_or(false);
      DI_ASSIGN_OR_RETURN(msg, convert_tool_calls(m, i, std::move(msg)));
      break;
    }
  }
  return std::optional<Message>(std::move(msg));
}

Status convert_tool_choice(const FieldReader& f, Conversation& conv) {
  const Json* choice = f.find("tool_choice");
  if (choice == nullptr) return Status();
  if (choice->is_string()) {
    auto c = parse_tool_choice(choice->get<std::string>());
    if (!c) return malformed("expected one of `none`, `auto`, `required` or a tool");
    conv.tool_choice = *c;
    return Status();
  }
  const FieldReader cr(*choice, "tool_choice");
  const Json* fn = cr.find("function");
  const Json* name = fn != nullptr ? FieldReader(*fn).find("name") : nullptr;
  if (!choice->is_object() || name == nullptr || !name->is_string()) {
    return malformed("expected one of `none`, `auto`, `required` or a tool");
  }
  std::vector<ToolDefinition> kept;
  for (const ToolDefinition& t : conv.tools) {
    if (t.name == name->get<std::string>()) kept.push_back(t);
  }
  if (kept.empty()) {
    return bad("Invalid value for 'tool_call': no function named '" + name->get<std::string>() +
               "' was specified in the 'tools' parameter.");
  }
  conv.tools = std::move(kept);
  conv.tool_choice = ToolChoice::kRequired;
  return Status();
}

// JSON mode goes into the prompt (deepseek-recipe's rendering) and the output; the schema and the
// regex only into the constraint.
Status convert_response_format(const FieldReader& f, Conversation& conv, InferenceOptions& inf) {
  DI_ASSIGN_OR_RETURN(const Json* rf, f.object("response_format"));
  if (rf == nullptr) return Status();
  const FieldReader format(*rf, "response_format");
  DI_ASSIGN_OR_RETURN(std::optional<std::string> type_field, format.string("type"));
  const std::string type = type_field.value_or("");
  if (type == "json_schema") {
    const Json* schema_format = format.find("json_schema");
    if (schema_format == nullptr) return bad("Missing required parameter: 'response_format.json_schema'.");
    DI_ASSIGN_OR_RETURN(inf.constraint, openai_json_schema_format(*schema_format, "response_format.json_schema"));
  } else if (type == "regex") {
    DI_ASSIGN_OR_RETURN(std::optional<std::string> regex, format.string("regex"));
    if (!regex) return bad("Missing required parameter: 'response_format.regex'.");
    inf.constraint.kind = ConstraintKind::kRegex;
    inf.constraint.text = std::move(*regex);
  } else if (type == "json_object") {
    bool found = false;
    for (const Message& m : conv.messages) found = found || contains_json_word(m.content);
    if (!found) {
      return bad(
          "Prompt must contain the word 'json' in some form to use 'response_format' of "
          "type 'json_object'.");
    }
    conv.response_format = ResponseFormat::kJsonObject;
    inf.constraint = json_object_constraint();
  } else if (type != "text") {
    return malformed("unknown variant `" + type +
                     "`, expected one of `json_object`, `json_schema`, `regex`, `text`");
  }
  return Status();
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
  if (messages.empty()) return bad("Empty input messages");

  DI_ASSIGN_OR_RETURN(ThinkingChoice tc, resolve_thinking(f, default_thinking(opts, out.model_version)));
  Conversation& conv = out.conversation;
  conv.thinking_mode = tc.thinking;
  conv.reasoning_effort = tc.effort;

  DI_ASSIGN_OR_RETURN(std::optional<double> temperature, f.number(kTemperatureSpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> top_p, f.number(kTopPSpec));
  const int64_t max_bound =
      tc.thinking ? opts.thinking_max_tokens_upper_bound : opts.non_thinking_max_tokens_upper_bound;
  DI_ASSIGN_OR_RETURN(out.inference_options.max_tokens, read_max_tokens(f, max_bound));
  DI_RETURN_IF_ERROR(check_passive_fields(f));
  // Not in deepseek-recipe's prompt; a forced call's grammar writes one call when it is false.
  DI_ASSIGN_OR_RETURN(std::optional<bool> parallel_calls, f.boolean("parallel_tool_calls"));
  out.inference_options.disable_parallel_tool_use = !parallel_calls.value_or(true);
  DI_ASSIGN_OR_RETURN(std::vector<std::string> stops, read_stop(f));
  DI_ASSIGN_OR_RETURN(std::optional<bool> stream, f.boolean("stream"));
  out.stream = stream.value_or(false);
  DI_ASSIGN_OR_RETURN(const Json* stream_options, f.object("stream_options"));
  if (stream_options != nullptr && !out.stream) {
    return bad("stream_options should be set along with stream = true");
  }
  std::optional<bool> include_usage;
  if (stream_options != nullptr) {
    DI_ASSIGN_OR_RETURN(include_usage,
                        FieldReader(*stream_options, "stream_options").boolean("include_usage"));
  }
  out.include_usage = !out.stream || include_usage.value_or(false);

  // Messages.
  const bool vision = out.model_version != ModelVersion::kDeepseekV4Pro;
  for (size_t i = 0; i < messages.size(); ++i) {
    DI_ASSIGN_OR_RETURN(std::optional<Message> m,
                        convert_message(messages[i], i, messages.size(), vision));
    if (m) conv.messages.push_back(std::move(*m));
  }
  // Filled in only now because the reference fills after reading every message.
  if (conv.thinking_mode) {
    for (Message& m : conv.messages) {
      if (m.role == Role::kAssistant && !m.reasoning) m.reasoning = "";
    }
  }

  DI_RETURN_IF_ERROR(check_tool_responses(messages));

  // Tools and tool choice.
  DI_ASSIGN_OR_RETURN(conv.tools, convert_tools(f));
  DI_RETURN_IF_ERROR(convert_tool_choice(f, conv));
  if (conv.tool_choice == ToolChoice::kNone) conv.tools.clear();
  if (conv.tools.empty() && conv.tool_choice == ToolChoice::kRequired)
    conv.tool_choice = ToolChoice::kAuto;
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }
  // Sampling settings the backend gets.
  InferenceOptions& inf = out.inference_options;
  DI_RETURN_IF_ERROR(convert_response_format(f, conv, inf));
  inf.temperature = !conv.thinking_mode && temperature ? *temperature : 1.0;
  inf.top_p = top_p.value_or(1.0);

  finish_conversion(out, std::move(stops));
  return out;
}

}  // namespace

Result<ConversationRequest> convert_chat_completions(std::string_view body,
                                                     const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
