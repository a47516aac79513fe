// OpenAI Responses -> ConversationRequest, with deepseek-recipe 0.2.0's validation and its
// exact 400 messages (recipe-spec.md §2.6; differences from the spec in docs/recipe.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "recipe/apply_patch_text.h"
#include "recipe/protocol.h"
#include "recipe/protocol_common.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Status bad(std::string message) { return invalid_argument(std::move(message)); }

// Text of a message's content: a string, or parts joined by "\n\n".
Result<std::string> content_text(const Json& content, bool vision,
                                 std::vector<ImageSource>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return malformed("content should be a string or a list");
  std::string text;
  bool first = true;
  for (const Json& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    std::string piece;
    if (type == "input_text" || type == "output_text") {
      if (!part.contains("text") || !part["text"].is_string())
        return malformed("text part needs text");
      piece = part["text"].get<std::string>();
    } else if (type == "input_image") {
      if (!vision) {
        piece = "[Unsupported Image]";
      } else {
        ImageSource src;
        src.location = part.value("image_url", "");
        src.kind = src.location.rfind("data:", 0) == 0 ? ImageSource::Kind::kDataUrl
                                                       : ImageSource::Kind::kUrl;
        if (part.contains("detail") && part["detail"].is_string()) {
          src.detail =
              parse_image_detail(part["detail"].get<std::string>()).value_or(ImageDetail::kHigh);
        }
        images->push_back(std::move(src));
        piece = kImageToken;
      }
    } else if (type == "input_file") {
      piece = "[Unsupported Document]";
    } else {
      return malformed(
          "unknown variant `" + type +
          "`, expected one of `input_text`, `output_text`, `input_image`, `input_file`");
    }
    if (!first) text += "\n\n";
    first = false;
    text += piece;
  }
  return text;
}

Status add_function(const Json& t, const std::string& where, const std::string& name_prefix,
                    std::optional<std::string> description, std::vector<ToolDefinition>& tools) {
  if (!t.contains("name") || !t["name"].is_string()) return malformed("missing field `name`");
  ToolDefinition def;
  const std::string local = t["name"].get<std::string>();
  DI_RETURN_IF_ERROR(validate_tool_name(local, where + ".name"));
  def.name = name_prefix + local;
  def.description = std::move(description);
  Json params = Json::object();
  if (t.contains("parameters") && !t["parameters"].is_null()) {
    params = t["parameters"];
    DI_RETURN_IF_ERROR(validate_tool_schema(def.name, params));
  }
  if (t.contains("strict") && t["strict"].is_boolean()) {
    def.strict = t["strict"].get<bool>();
    if (*def.strict) DI_RETURN_IF_ERROR(normalize_strict_schema(params));
  }
  def.parameters_json = params.dump();
  tools.push_back(std::move(def));
  return Status();
}

Result<std::vector<ToolDefinition>> convert_tools(const Json& req, const ConversionOptions& opts,
                                                  bool v4) {
  std::vector<ToolDefinition> tools;
  if (!req.contains("tools") || req["tools"].is_null()) return tools;
  if (!req["tools"].is_array()) return malformed("tools must be an array");
  for (size_t i = 0; i < req["tools"].size(); ++i) {
    const Json& t = req["tools"][i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    const std::string type = t.is_object() ? t.value("type", "") : "";
    if (type == "function") {
      std::optional<std::string> desc;
      if (t.contains("description") && t["description"].is_string())
        desc = t["description"].get<std::string>();
      DI_RETURN_IF_ERROR(add_function(t, where, "", desc, tools));
    } else if (type == "namespace") {
      const std::string ns = t.value("name", "");
      const std::string ns_desc = t.contains("description") && t["description"].is_string()
                                      ? t["description"].get<std::string>()
                                      : "";
      std::set<std::string> inner;
      const Json& fns = t.contains("tools") ? t["tools"] : Json::array();
      for (size_t j = 0; j < fns.size(); ++j) {
        const Json& f = fns[j];
        if (!f.is_object() || f.value("type", "") != "function") {
          return malformed("namespace tools must be functions");
        }
        if (!inner.insert(f.value("name", "")).second) {
          return bad("Tool names within a namespace must be unique.");
        }
        std::optional<std::string> fn_desc;
        if (f.contains("description") && f["description"].is_string())
          fn_desc = f["description"].get<std::string>();
        // V4.1 names a namespaced function "ns::fn" and prefixes the namespace's description;
        // V4 names it "ns__fn" and keeps the function's own description.
        std::optional<std::string> desc = fn_desc;
        if (!v4 && (!ns_desc.empty() || fn_desc)) desc = ns_desc + "\n" + fn_desc.value_or("");
        DI_RETURN_IF_ERROR(add_function(f, where + ".tools[" + std::to_string(j) + "]",
                                        ns + (v4 ? "__" : "::"), desc, tools));
      }
    } else if (type == "custom") {
      const std::string name = t.value("name", "");
      if (name != "apply_patch") {
        return bad("Unsupported custom tool: '" + name + "'. Only 'apply_patch' is supported.");
      }
      ToolDefinition def;
      def.name = name;
      def.description = v4 ? apply_patch_description_v4() : std::string(kApplyPatchDescription);
      def.parameters_json = kApplyPatchSchema;
      tools.push_back(std::move(def));
    } else if (type.rfind("web_search", 0) == 0) {
      if (opts.responses_web_search == WebSearchBehavior::kReject) {
        return bad("Server tools are not supported");
      }
    }
    // Other tool types are ignored.
  }
  std::set<std::string> names;
  for (const ToolDefinition& t : tools) {
    if (!names.insert(t.name).second) return bad("Tool names must be unique.");
  }
  return tools;
}

struct PendingCall {
  ToolCall call;
  std::optional<std::string> output;
};

Result<ConversationRequest> convert(const Json& req, const ConversionOptions& opts) {
  if (!req.is_object()) return malformed("expected an object");
  if (!req.contains("model") || !req["model"].is_string())
    return malformed("missing field `model`");
  ConversationRequest out;
  out.model = req["model"].get<std::string>();
  DI_ASSIGN_OR_RETURN(out.model_version, resolve_model(out.model, opts));
  const bool vision = out.model_version != ModelVersion::kDeepseekV4Pro;
  Conversation& conv = out.conversation;

  // Thinking from reasoning.effort.
  conv.thinking_mode = default_thinking(opts, out.model_version);
  if (req.contains("reasoning") && req["reasoning"].is_object() &&
      req["reasoning"].contains("effort") && req["reasoning"]["effort"].is_string()) {
    const std::string word = req["reasoning"]["effort"].get<std::string>();
    if (word == "none") {
      conv.thinking_mode = false;
    } else if (auto e = map_effort_word(word)) {
      conv.thinking_mode = true;
      conv.reasoning_effort = *e;
    } else {
      return malformed("unknown variant `" + word + "` for reasoning.effort");
    }
  }
  if (conv.thinking_mode && !conv.reasoning_effort) conv.reasoning_effort = ReasoningEffort::kHigh;
  if (!conv.thinking_mode) conv.reasoning_effort.reset();

  DI_RETURN_IF_ERROR(
      check_range(req, "temperature", 0, 2, false,
                  "Invalid temperature value, the valid range of temperature is [0, 2]"));
  DI_RETURN_IF_ERROR(check_range(req, "top_p", 0, 1, true,
                                 "Invalid top_p value, the valid range of top_p is (0, 1.0]"));
  if (req.contains("max_output_tokens") && req["max_output_tokens"].is_number_integer()) {
    const int64_t bound = conv.thinking_mode ? opts.thinking_max_tokens_upper_bound
                                             : opts.non_thinking_max_tokens_upper_bound;
    const int64_t v = req["max_output_tokens"].get<int64_t>();
    if (v < 1 || v > bound) {
      return bad("Invalid max_tokens value, the valid range of max_tokens is [1, " +
                 std::to_string(bound) + "]");
    }
    out.inference_options.max_tokens = v;
  }
  out.stream = req.value("stream", false) == true;

  // Tools come first: historical namespaced calls are named after them.
  const bool v4 = out.model_version == ModelVersion::kDeepseekV4Pro;
  DI_ASSIGN_OR_RETURN(conv.tools, convert_tools(req, opts, v4));

  const bool has_instructions = req.contains("instructions") && req["instructions"].is_string();
  const bool has_input = req.contains("input") && !req["input"].is_null();
  if (!has_instructions && !has_input) return bad("Either input or instructions must be provided");
  if (has_instructions && !req["instructions"].get<std::string>().empty()) {
    conv.messages.push_back(Message::system(req["instructions"].get<std::string>()));
  }

  std::vector<PendingCall> pending;
  std::set<std::string> call_ids;
  // A complete group: calls sorted by call_id go to the last assistant (or a new one), then
  // their outputs in the same order.
  auto flush = [&]() {
    std::sort(pending.begin(), pending.end(),
              [](const PendingCall& a, const PendingCall& b) { return a.call.id < b.call.id; });
    if (conv.messages.empty() || conv.messages.back().role != Role::kAssistant ||
        !conv.messages.back().tool_calls.empty()) {
      conv.messages.push_back(Message::assistant(""));
    }
    for (const PendingCall& p : pending) conv.messages.back().tool_calls.push_back(p.call);
    for (const PendingCall& p : pending)
      conv.messages.push_back(Message::tool(*p.output, p.call.id));
    pending.clear();
  };
  auto require_no_pending = [&]() -> Status {
    for (const PendingCall& p : pending) {
      if (!p.output) return bad("No tool output found for tool call " + p.call.id + ".");
    }
    return Status();
  };

  if (has_input && req["input"].is_string()) {
    conv.messages.push_back(Message::user(req["input"].get<std::string>()));
  } else if (has_input) {
    const Json& items = req["input"];
    if (!items.is_array()) return malformed("input must be a string or a list");
    if (items.empty()) return bad("Input items array must not be empty");
    for (size_t i = 0; i < items.size(); ++i) {
      const Json& item = items[i];
      if (!item.is_object()) return malformed("input item must be an object");
      const std::string type = item.value("type", item.contains("role") ? "message" : "");
      if (type == "message") {
        DI_RETURN_IF_ERROR(require_no_pending());
        const std::string role = item.value("role", "");
        Message m;
        DI_ASSIGN_OR_RETURN(
            m.content, content_text(item.contains("content") ? item["content"] : Json(), vision,
                                    &m.image_sources));
        if (role == "system" || (role == "developer" && !v4)) {
          m.role = Role::kSystem;
        } else if (role == "developer") {
          m.role = Role::kUser;  // V4 hears the developer as the user
        } else if (role == "user") {
          m.role = Role::kUser;
        } else if (role == "assistant") {
          if (!conv.messages.empty() && conv.messages.back().role == Role::kAssistant &&
              conv.messages.back().tool_calls.empty()) {
            Message& last = conv.messages.back();
            last.content += (last.content.empty() ? "" : "\n\n") + m.content;
            continue;
          }
          m.role = Role::kAssistant;
        } else {
          return malformed("unknown role `" + role + "`");
        }
        conv.messages.push_back(std::move(m));
      } else if (type == "reasoning") {
        DI_RETURN_IF_ERROR(require_no_pending());
        std::string text;
        bool any = false;
        if (item.contains("content") && item["content"].is_array()) {
          for (const Json& part : item["content"]) {
            if (!part.is_object() || !part.contains("text") || !part["text"].is_string()) continue;
            if (any) text += "\n";
            any = true;
            text += part["text"].get<std::string>();
          }
        }
        if (!any) continue;
        if (!conv.messages.empty() && conv.messages.back().role == Role::kAssistant &&
            conv.messages.back().content.empty() && conv.messages.back().tool_calls.empty()) {
          conv.messages.back().reasoning = text;
        } else {
          conv.messages.push_back(Message::assistant("", text));
        }
      } else if (type == "function_call" || type == "custom_tool_call") {
        const std::string id = item.value("call_id", "");
        if (id.empty()) {
          return bad("Invalid 'input[" + std::to_string(i) +
                     "].call_id': empty string. Expected a string with minimum length 1, but got "
                     "an empty string instead.");
        }
        if (!call_ids.insert(id).second) return bad("Duplicate 'call_id': " + id + ".");
        ToolCall call;
        call.id = id;
        call.name = item.value("name", "");
        if (item.contains("namespace") && item["namespace"].is_string()) {
          call.name = item["namespace"].get<std::string>() + (v4 ? "__" : "::") + call.name;
        }
        if (type == "custom_tool_call") {
          call.arguments = Json{{"input", item.value("input", "")}}.dump();
        } else {
          call.arguments = item.value("arguments", "");
        }
        pending.push_back({std::move(call), std::nullopt});
      } else if (type == "function_call_output" || type == "custom_tool_call_output") {
        const std::string id = item.value("call_id", "");
        auto it = std::find_if(pending.begin(), pending.end(),
                               [&](const PendingCall& p) { return p.call.id == id && !p.output; });
        if (it == pending.end())
          return bad("No tool call found for tool output with call_id " + id + ".");
        const Json& output = item.contains("output") ? item["output"] : Json("");
        if (output.is_string()) {
          it->output = output.get<std::string>();
        } else {
          std::vector<ImageSource> ignored;
          DI_ASSIGN_OR_RETURN(std::string text, content_text(output, false, &ignored));
          it->output = text;
        }
        if (std::all_of(pending.begin(), pending.end(),
                        [](const PendingCall& p) { return p.output.has_value(); })) {
          flush();
        }
      }
      // Other items (web_search_call, ...) carry nothing the model sees.
    }
    DI_RETURN_IF_ERROR(require_no_pending());
  }
  if (conv.thinking_mode) {
    for (Message& m : conv.messages) {
      if (m.role == Role::kAssistant && !m.reasoning) m.reasoning = "";
    }
  }

  // Tool choice.
  if (req.contains("tool_choice") && !req["tool_choice"].is_null()) {
    const Json& choice = req["tool_choice"];
    if (choice.is_string()) {
      auto c = parse_tool_choice(choice.get<std::string>());
      if (!c) return malformed("unknown tool_choice");
      conv.tool_choice = *c;
    } else if (choice.is_object()) {
      const std::string type = choice.value("type", "");
      if (type == "function" || type == "custom") {
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
      } else if (type.rfind("web_search", 0) == 0) {
        if (opts.responses_web_search == WebSearchBehavior::kReject) {
          return bad("Server tools are not supported");
        }
      } else if (!type.empty()) {
        auto c = parse_tool_choice(type);
        if (c) conv.tool_choice = *c;
      }
    }
  }
  if (conv.tool_choice == ToolChoice::kNone) conv.tools.clear();
  if (conv.tools.empty() && conv.tool_choice == ToolChoice::kRequired)
    conv.tool_choice = ToolChoice::kAuto;
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }

  // Output format.
  if (req.contains("text") && req["text"].is_object() && req["text"].contains("format") &&
      req["text"]["format"].is_object() &&
      req["text"]["format"].value("type", "") == "json_object") {
    bool found = false;
    for (const Message& m : conv.messages) found = found || contains_json_word(m.content);
    if (!found) {
      return bad(
          "Response input messages must contain the word 'json' in some form to use "
          "'text.format' of type 'json_object'.");
    }
    conv.response_format = ResponseFormat::kJsonObject;
  }

  InferenceOptions& inf = out.inference_options;
  inf.temperature = 1.0;
  if (!conv.thinking_mode && req.contains("temperature") && req["temperature"].is_number()) {
    inf.temperature = req["temperature"].get<double>();
  }
  inf.top_p = req.contains("top_p") && req["top_p"].is_number() ? req["top_p"].get<double>() : 1.0;

  finish_conversion(out, {});
  return out;
}

}  // namespace

Result<ConversationRequest> convert_responses(std::string_view body,
                                              const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
