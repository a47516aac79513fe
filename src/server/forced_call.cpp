#include "server/forced_call.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

namespace {

using Json = nlohmann::ordered_json;

Result<Json> arguments_schema(const recipe::ToolDefinition& tool) {
  Json schema = Json::parse(tool.parameters_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_null()) schema = Json::object();
  if (!schema.is_object()) {
    return invalid_argument("tool '" + tool.name + "': parameters must be a JSON Schema object to force a call of it");
  }
  if (!schema.contains("type")) schema["type"] = "object";
  return schema;
}

// Every "$ref": "#..." inside `schema` now points below `base` (a JSON Pointer).
void rebase_refs(Json& schema, const std::string& base) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string() && value.get<std::string>().starts_with("#")) {
        value = "#" + base + value.get<std::string>().substr(1);
      } else {
        rebase_refs(value, base);
      }
    }
  } else if (schema.is_array()) {
    for (Json& item : schema) rebase_refs(item, base);
  }
}

// A GBNF string literal of `text`.
std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += "\\x";
          out += kHex[(c >> 4) & 15];
          out += kHex[c & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Keys of a string schema that raw text (string="true") still says exactly.
bool raw_string_keyword(const std::string& key) {
  for (const char* k : {"type", "minLength", "maxLength", "title", "description", "examples", "default", "$comment"}) {
    if (key == k) return true;
  }
  return false;
}

constexpr std::string_view kFullwidthBar = "｜";

// The value of one parameter in GBNF: raw text after string="true", or JSON after string="false".
std::string dsml_value(const Json& schema, const Json& root) {
  const std::string raw_value = gbnf_literal("string=\"true\">") + " ";
  if (schema.is_object() && schema.value("type", Json()) == "string") {
    bool raw = true;
    for (const auto& [key, value] : schema.items()) raw = raw && (raw_string_keyword(key) || key == "pattern");
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (raw && schema.contains("pattern") && schema["pattern"].is_string() && !lengths) {
      return raw_value + "%pattern " + gbnf_literal(schema["pattern"].get<std::string>());
    }
    if (raw && !schema.contains("pattern")) {
      const int64_t min = schema.value("minLength", int64_t{0});
      const int64_t max = schema.value("maxLength", int64_t{-1});
      std::string repeat = max >= 0 ? "{" + std::to_string(min) + "," + std::to_string(max) + "}"
                                    : min > 0 ? "{" + std::to_string(min) + ",}" : "*";
      // Small bounds only: GBNF unrolls {m,n} into states.
      if (min <= 4096 && max <= 4096) return raw_value + "[^｜]" + repeat;
    }
  }
  if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array() && !schema["enum"].empty() &&
      schema.size() <= 2 && (schema.size() == 1 || schema.value("type", Json()) == "string")) {
    std::string alts;
    for (const Json& v : schema["enum"]) {
      if (!v.is_string() || v.get_ref<const std::string&>().find(kFullwidthBar) != std::string::npos) {
        alts.clear();
        break;
      }
      alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.get_ref<const std::string&>());
    }
    if (!alts.empty()) return raw_value + "(" + alts + ")";
  }
  Json own = schema.is_boolean() ? (schema.get<bool>() ? Json::object() : Json{{"not", Json::object()}}) : schema;
  if (own.is_object()) {
    for (const char* defs : {"$defs", "definitions"}) {
      if (root.contains(defs) && !own.contains(defs)) own[defs] = root[defs];
    }
  }
  return gbnf_literal("string=\"false\">") + " %json " + own.dump();
}

// {"anyOf": [one {"name": N, "arguments": ...} object per tool]}; with strict_only, the tools
// without strict: true take any arguments object.
Result<std::string> tagged_calls_schema(const std::vector<recipe::ToolDefinition>& tools, bool strict_only) {
  Json any_of = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    DI_ASSIGN_OR_RETURN(Json arguments, arguments_schema(tools[i]));
    if (strict_only && !tools[i].strict.value_or(false)) arguments = Json{{"type", "object"}};
    rebase_refs(arguments, "/anyOf/" + std::to_string(i) + "/properties/arguments");
    Json one = {{"type", "object"},
                {"properties", {{"name", {{"const", tools[i].name}}}, {"arguments", std::move(arguments)}}},
                {"required", {"name", "arguments"}},
                {"additionalProperties", false}};
    any_of.push_back(std::move(one));
  }
  return Json{{"anyOf", std::move(any_of)}}.dump();
}

}  // namespace

Result<Constraint> forced_dsml_call(const std::vector<recipe::ToolDefinition>& tools, recipe::PromptEncoding encoding,
                                    const DsmlCallOptions& options) {
  const recipe::DsmlTags tags = recipe::dsml_tags(encoding);
  const std::string dsml(recipe::kDsmlToken);
  auto open = [&](std::string_view tag) { return gbnf_literal("<" + dsml + std::string(tag) + " name=\""); };
  auto close = [&](std::string_view tag) { return gbnf_literal("</" + dsml + std::string(tag) + ">"); };
  const std::string opening = options.opens_block ? gbnf_literal("\n\n<" + dsml + std::string(tags.block) + ">\n") + " "
                              : options.opened_by_model ? "\"\\n\" "
                                                        : "";
  std::string gbnf = "root ::= " + opening + "invoke " +
                     (options.one_call ? "" : "(\"\\n\" invoke)* ") + gbnf_literal("\n</" + dsml + std::string(tags.block) + ">") + "\n";
  std::string invokes = "invoke ::= ";
  for (size_t t = 0; t < tools.size(); ++t) {
    DI_ASSIGN_OR_RETURN(Json schema, arguments_schema(tools[t]));
    const std::string rule = "invoke-" + std::to_string(t);
    invokes += (t ? " | " : "") + rule;
    std::string body = open(tags.invoke) + " " + gbnf_literal(tools[t].name + "\">\n");
    if (options.strict_only && !tools[t].strict.value_or(false)) {
      // Any parameters, as the parser reads them: a name without a quote, raw text without "｜".
      const std::string any_line = open(tags.parameter) + " [^\"]* " + gbnf_literal("\" string=\"") +
                                   " (\"true\" | \"false\") " + gbnf_literal("\">") + " [^｜]* " + close(tags.parameter) +
                                   " \"\\n\"";
      gbnf += rule + " ::= " + body + " (" + any_line + ")* " +
              (encoding == recipe::PromptEncoding::kDeepseekV41 ? "\"\\n\"? " : "") + close(tags.invoke) + "\n";
      continue;
    }
    const Json properties = schema.value("properties", Json::object());
    const Json required = schema.value("required", Json::array());
    if (!properties.is_object() || properties.empty()) {
      // Joined lines of no parameters: V4 writes ">\n</invoke>", V4.1 ">\n\n</invoke>".
      if (encoding == recipe::PromptEncoding::kDeepseekV41) body += " \"\\n\"";
    }
    for (const auto& [name, property] : properties.items()) {
      if (name.find('"') != std::string::npos) {
        return invalid_argument("tool '" + tools[t].name + "': parameter name " + Json(name).dump() +
                                " holds a quote, which a DeepSeek tool call cannot write");
      }
      const bool is_required = std::find(required.begin(), required.end(), Json(name)) != required.end();
      const std::string line = open(tags.parameter) + " " + gbnf_literal(name + "\" ") + " " + dsml_value(property, schema) +
                               " " + close(tags.parameter) + " \"\\n\"";
      body += is_required ? " " + line : " (" + line + ")?";
    }
    gbnf += rule + " ::= " + body + " " + close(tags.invoke) + "\n";
  }
  Constraint c;
  c.kind = ConstraintKind::kGbnf;
  c.text = gbnf + invokes + "\n";
  if (options.opened_by_model) c.start_after = "<" + dsml + std::string(tags.block) + ">";
  return c;
}

Result<ForcedCall> forced_tagged_call(const std::vector<recipe::ToolDefinition>& tools) {
  ForcedCall call;
  call.constraint.kind = ConstraintKind::kJsonSchema;
  if (tools.size() == 1) {
    DI_ASSIGN_OR_RETURN(Json schema, arguments_schema(tools[0]));
    call.opening = "<tool_call>\n{\"name\": " + Json(tools[0].name).dump() + ", \"arguments\": ";
    call.closing = "}\n</tool_call>";
    call.constraint.text = schema.dump();
    return call;
  }
  DI_ASSIGN_OR_RETURN(call.constraint.text, tagged_calls_schema(tools, /*strict_only=*/false));
  call.opening = "<tool_call>\n";
  call.closing = "\n</tool_call>";
  return call;
}

Result<Constraint> strict_tagged_calls(const std::vector<recipe::ToolDefinition>& tools) {
  DI_ASSIGN_OR_RETURN(std::string schema, tagged_calls_schema(tools, /*strict_only=*/true));
  Constraint c;
  c.kind = ConstraintKind::kGbnf;
  c.text = "root ::= call (\"\\n<tool_call>\" call)*\ncall ::= [ \\n]* %json " + schema +
           " [ \\n]* \"</tool_call>\"\n";
  c.start_after = "<tool_call>";
  return c;
}

}  // namespace deepinfer::server
