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
#include "recipe/output_format.h"
#include "recipe/protocol_common.h"
#include "recipe/request_fields.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Status bad(std::string message) { return invalid_argument(std::move(message)); }

// Text of a message's content (`where` names it): a string, or parts joined by "\n\n".
Result<std::string> content_text(const Json& content, const std::string& where, bool vision,
                                 std::vector<ImageSource>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return type_error(where, "a string or an array of content parts", content);
  std::string text;
  bool first = true;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string part_path = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return type_error(part_path, "an object", part);
    const FieldReader p(part, part_path);
    DI_ASSIGN_OR_RETURN(const std::string type, p.string_or("type", ""));
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
        DI_ASSIGN_OR_RETURN(src.location, p.string_or("image_url", ""));
        src.kind = src.location.rfind("data:", 0) == 0 ? ImageSource::Kind::kDataUrl
                                                       : ImageSource::Kind::kUrl;
        DI_ASSIGN_OR_RETURN(std::optional<std::string> detail, p.string("detail"));
        if (detail) src.detail = parse_image_detail(*detail).value_or(ImageDetail::kHigh);
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
  const FieldReader tr(t, where);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> name, tr.string("name"));
  if (!name) return malformed("missing field `" + tr.path("name") + "`");
  ToolDefinition def;
  const std::string local = std::move(*name);
  DI_RETURN_IF_ERROR(validate_tool_name(local, where + ".name"));
  def.name = name_prefix + local;
  def.description = std::move(description);
  Json params = Json::object();
  if (t.contains("parameters") && !t["parameters"].is_null()) {
    params = t["parameters"];
    DI_RETURN_IF_ERROR(validate_tool_schema(def.name, params));
  }
  DI_ASSIGN_OR_RETURN(def.strict, tr.boolean("strict"));
  if (def.strict.value_or(false)) DI_RETURN_IF_ERROR(normalize_strict_schema(params));
  def.parameters_json = params.dump();
  tools.push_back(std::move(def));
  return Status();
}

Result<std::vector<ToolDefinition>> convert_tools(const Json& req, const ConversionOptions& opts,
                                                  bool v4) {
  std::vector<ToolDefinition> tools;
  if (!req.contains("tools") || req["tools"].is_null()) return tools;
  if (!req["tools"].is_array()) return type_error("tools", "an array", req["tools"]);
  for (size_t i = 0; i < req["tools"].size(); ++i) {
    const Json& t = req["tools"][i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return type_error(where, "an object", t);
    const FieldReader tr(t, where);
    DI_ASSIGN_OR_RETURN(const std::string type, tr.string_or("type", ""));
    if (type == "function") {
      DI_ASSIGN_OR_RETURN(std::optional<std::string> desc, tr.string("description"));
      DI_RETURN_IF_ERROR(add_function(t, where, "", desc, tools));
    } else if (type == "namespace") {
      DI_ASSIGN_OR_RETURN(const std::string ns, tr.string_or("name", ""));
      DI_ASSIGN_OR_RETURN(const std::string ns_desc, tr.string_or("description", ""));
      std::set<std::string> inner;
      DI_ASSIGN_OR_RETURN(const Json* fns_field, tr.array("tools"));
      const Json fns = fns_field != nullptr ? *fns_field : Json::array();
      for (size_t j = 0; j < fns.size(); ++j) {
        const Json& f = fns[j];
        const std::string fn_where = where + ".tools[" + std::to_string(j) + "]";
        if (!f.is_object()) return type_error(fn_where, "an object", f);
        const FieldReader fr(f, fn_where);
        DI_ASSIGN_OR_RETURN(const std::string fn_type, fr.string_or("type", ""));
        if (fn_type != "function") return malformed("namespace tools must be functions");
        DI_ASSIGN_OR_RETURN(const std::string fn_name, fr.string_or("name", ""));
        if (!inner.insert(fn_name).second) {
          return bad("Tool names within a namespace must be unique.");
        }
        DI_ASSIGN_OR_RETURN(std::optional<std::string> fn_desc, fr.string("description"));
        // V4.1 names a namespaced function "ns::fn" and prefixes the namespace's description;
        // V4 names it "ns__fn" and keeps the function's own description.
        std::optional<std::string> desc = fn_desc;
        if (!v4 && (!ns_desc.empty() || fn_desc)) desc = ns_desc + "\n" + fn_desc.value_or("");
        DI_RETURN_IF_ERROR(add_function(f, where + ".tools[" + std::to_string(j) + "]",
                                        ns + (v4 ? "__" : "::"), desc, tools));
      }
    } else if (type == "custom") {
      DI_ASSIGN_OR_RETURN(const std::string name, tr.string_or("name", ""));
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

// Fields accepted whose effect this server does not have: only their type and range are
// checked (docs/server.md, "Request fields").
Status check_passive_fields(const FieldReader& f) {
  DI_RETURN_IF_ERROR(f.integer(kTopLogprobsSpec).status());
  DI_RETURN_IF_ERROR(f.integer({"max_tool_calls", 1, INT64_MAX}).status());
  DI_RETURN_IF_ERROR(f.boolean("parallel_tool_calls").status());
  DI_RETURN_IF_ERROR(f.boolean("store").status());
  DI_RETURN_IF_ERROR(f.boolean("background").status());
  DI_RETURN_IF_ERROR(f.string("user").status());
  DI_RETURN_IF_ERROR(f.object("metadata").status());
  // A stored response to continue from: this server keeps none, so the conversation the
  // client means cannot be rebuilt; answering without it would be silently wrong.
  DI_ASSIGN_OR_RETURN(std::optional<std::string> previous, f.string("previous_response_id"));
  if (previous) {
    return bad("previous_response_id is not supported: this server stores no responses; send the "
               "whole conversation in input");
  }
  return Status();
}

struct PendingCall {
  ToolCall call;
  std::optional<std::string> output;
};

Result<ConversationRequest> convert(const Json& req, const ConversionOptions& opts) {
  if (!req.is_object()) return malformed("expected an object");
  const FieldReader f(req);
  DI_ASSIGN_OR_RETURN(std::optional<std::string> model, f.string("model"));
  if (!model) return malformed("missing field `model`");
  ConversationRequest out;
  out.model = std::move(*model);
  DI_ASSIGN_OR_RETURN(out.model_version, resolve_model(out.model, opts));
  const bool vision = out.model_version != ModelVersion::kDeepseekV4Pro;
  Conversation& conv = out.conversation;

  // Thinking from reasoning.effort.
  conv.thinking_mode = default_thinking(opts, out.model_version);
  DI_ASSIGN_OR_RETURN(const Json* reasoning, f.object("reasoning"));
  std::optional<std::string> effort;
  if (reasoning != nullptr) {
    const FieldReader r(*reasoning, "reasoning");
    DI_ASSIGN_OR_RETURN(effort, r.string("effort"));
    DI_RETURN_IF_ERROR(r.string("summary").status());
  }
  if (effort) {
    const std::string& word = *effort;
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

  DI_ASSIGN_OR_RETURN(std::optional<double> temperature, f.number(kTemperatureSpec));
  DI_ASSIGN_OR_RETURN(std::optional<double> top_p, f.number(kTopPSpec));
  const int64_t bound = conv.thinking_mode ? opts.thinking_max_tokens_upper_bound
                                           : opts.non_thinking_max_tokens_upper_bound;
  // deepseek-recipe words this limit's range error after Chat's max_tokens.
  const std::string range_message =
      "Invalid max_tokens value, the valid range of max_tokens is [1, " + std::to_string(bound) + "]";
  DI_ASSIGN_OR_RETURN(out.inference_options.max_tokens,
                      f.integer({"max_output_tokens", 1, bound, range_message}));
  DI_RETURN_IF_ERROR(check_passive_fields(f));
  // Not in deepseek-recipe's prompt; a forced call's grammar writes one call when it is false.
  DI_ASSIGN_OR_RETURN(std::optional<bool> parallel_calls, f.boolean("parallel_tool_calls"));
  out.inference_options.disable_parallel_tool_use = !parallel_calls.value_or(true);
  DI_ASSIGN_OR_RETURN(std::optional<bool> stream, f.boolean("stream"));
  out.stream = stream.value_or(false);

  // Tools come first: historical namespaced calls are named after them.
  const bool v4 = out.model_version == ModelVersion::kDeepseekV4Pro;
  DI_ASSIGN_OR_RETURN(conv.tools, convert_tools(req, opts, v4));

  DI_ASSIGN_OR_RETURN(std::optional<std::string> instructions, f.string("instructions"));
  const bool has_input = f.has("input");
  if (!instructions && !has_input) return bad("Either input or instructions must be provided");
  if (instructions && !instructions->empty()) conv.messages.push_back(Message::system(*instructions));

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
    if (!items.is_array()) return type_error("input", "a string or an array of items", items);
    if (items.empty()) return bad("Input items array must not be empty");
    for (size_t i = 0; i < items.size(); ++i) {
      const Json& item = items[i];
      const std::string where = "input[" + std::to_string(i) + "]";
      if (!item.is_object()) return type_error(where, "an object", item);
      const FieldReader it_fields(item, where);
      DI_ASSIGN_OR_RETURN(const std::string type,
                          it_fields.string_or("type", item.contains("role") ? "message" : ""));
      if (type == "message") {
        DI_RETURN_IF_ERROR(require_no_pending());
        DI_ASSIGN_OR_RETURN(const std::string role, it_fields.string_or("role", ""));
        Message m;
        DI_ASSIGN_OR_RETURN(m.content, content_text(item.contains("content") ? item["content"] : Json(),
                                                    where + ".content", vision, &m.image_sources));
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
        DI_ASSIGN_OR_RETURN(const std::string id, it_fields.string_or("call_id", ""));
        if (id.empty()) {
          return bad("Invalid 'input[" + std::to_string(i) +
                     "].call_id': empty string. Expected a string with minimum length 1, but got "
                     "an empty string instead.");
        }
        if (!call_ids.insert(id).second) return bad("Duplicate 'call_id': " + id + ".");
        ToolCall call;
        call.id = id;
        DI_ASSIGN_OR_RETURN(call.name, it_fields.string_or("name", ""));
        DI_ASSIGN_OR_RETURN(std::optional<std::string> ns, it_fields.string("namespace"));
        if (ns) call.name = *ns + (v4 ? "__" : "::") + call.name;
        if (type == "custom_tool_call") {
          DI_ASSIGN_OR_RETURN(const std::string input, it_fields.string_or("input", ""));
          call.arguments = Json{{"input", input}}.dump();
        } else {
          DI_ASSIGN_OR_RETURN(call.arguments, it_fields.string_or("arguments", ""));
        }
        pending.push_back({std::move(call), std::nullopt});
      } else if (type == "function_call_output" || type == "custom_tool_call_output") {
        DI_ASSIGN_OR_RETURN(const std::string id, it_fields.string_or("call_id", ""));
        auto it = std::find_if(pending.begin(), pending.end(),
                               [&](const PendingCall& p) { return p.call.id == id && !p.output; });
        if (it == pending.end())
          return bad("No tool call found for tool output with call_id " + id + ".");
        const Json& output = item.contains("output") ? item["output"] : Json("");
        if (output.is_string()) {
          it->output = output.get<std::string>();
        } else {
          std::vector<ImageSource> ignored;
          DI_ASSIGN_OR_RETURN(std::string text, content_text(output, where + ".output", false, &ignored));
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
      const FieldReader c(choice, "tool_choice");
      DI_ASSIGN_OR_RETURN(const std::string type, c.string_or("type", ""));
      if (type == "function" || type == "custom") {
        DI_ASSIGN_OR_RETURN(const std::string name, c.string_or("name", ""));
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
        if (auto parsed = parse_tool_choice(type)) conv.tool_choice = *parsed;
      }
    } else {
      return type_error("tool_choice", "a string or an object", choice);
    }
  }
  if (conv.tool_choice == ToolChoice::kNone) conv.tools.clear();
  if (conv.tools.empty() && conv.tool_choice == ToolChoice::kRequired)
    conv.tool_choice = ToolChoice::kAuto;
  if (conv.thinking_mode && conv.tool_choice == ToolChoice::kRequired) {
    return bad("Thinking mode does not support this tool_choice");
  }

  // Output format.
  DI_ASSIGN_OR_RETURN(const Json* text, f.object("text"));
  const Json* format = nullptr;
  if (text != nullptr) {
    const FieldReader t(*text, "text");
    DI_ASSIGN_OR_RETURN(format, t.object("format"));
    DI_RETURN_IF_ERROR(t.string("verbosity").status());
  }
  std::string format_type;
  if (format != nullptr) {
    DI_ASSIGN_OR_RETURN(format_type, FieldReader(*format, "text.format").string_or("type", ""));
  }
  InferenceOptions& inf = out.inference_options;
  if (format_type == "json_object") {
    bool found = false;
    for (const Message& m : conv.messages) found = found || contains_json_word(m.content);
    if (!found) {
      return bad(
          "Response input messages must contain the word 'json' in some form to use "
          "'text.format' of type 'json_object'.");
    }
    conv.response_format = ResponseFormat::kJsonObject;
    inf.constraint = json_object_constraint();
  } else if (format_type == "json_schema") {
    DI_ASSIGN_OR_RETURN(inf.constraint, openai_json_schema_format(*format, "text.format"));
  } else if (!format_type.empty() && format_type != "text") {
    return bad("Invalid value: '" + format_type + "'. Supported values are: 'text', 'json_object' and 'json_schema'.");
  }

  inf.temperature = !conv.thinking_mode && temperature ? *temperature : 1.0;
  inf.top_p = top_p.value_or(1.0);

  finish_conversion(out, {});
  return out;
}

}  // namespace

Result<ConversationRequest> convert_responses(std::string_view body,
                                              const ConversionOptions& options) {
  return parse_then_convert(body, [&](const Json& req) { return convert(req, options); });
}

}  // namespace deepinfer::recipe
