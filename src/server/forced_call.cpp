#include "server/forced_call.h"

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

}  // namespace

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
  Json any_of = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    DI_ASSIGN_OR_RETURN(Json arguments, arguments_schema(tools[i]));
    rebase_refs(arguments, "/anyOf/" + std::to_string(i) + "/properties/arguments");
    Json one = {{"type", "object"},
                {"properties", {{"name", {{"const", tools[i].name}}}, {"arguments", std::move(arguments)}}},
                {"required", {"name", "arguments"}},
                {"additionalProperties", false}};
    any_of.push_back(std::move(one));
  }
  call.opening = "<tool_call>\n";
  call.closing = "\n</tool_call>";
  call.constraint.text = Json{{"anyOf", std::move(any_of)}}.dump();
  return call;
}

}  // namespace deepinfer::server
