#include "recipe/output_format.h"

#include <string>

#include "recipe/request_fields.h"

namespace deepinfer::recipe {

using Json = nlohmann::ordered_json;

namespace {

// "'<path>' <what>", appended piece by piece: "lit" + std::string trips GCC 12's -Wrestrict.
Status field_error(std::string_view path, std::string_view what) {
  std::string message = "'";
  message += path;
  message += "' ";
  message += what;
  return invalid_argument(std::move(message));
}

}  // namespace

Constraint json_object_constraint() {
  Constraint c;
  c.kind = ConstraintKind::kJsonSchema;
  c.text = R"({"type":"object"})";
  return c;
}

Result<Constraint> json_schema_constraint(const Json& schema, std::string_view path) {
  if (!schema.is_object() && !(schema.is_boolean() && schema.get<bool>())) {
    return field_error(path, "must be a JSON Schema object");
  }
  Constraint c;
  c.kind = ConstraintKind::kJsonSchema;
  c.text = schema.dump();
  return c;
}

Result<Constraint> openai_json_schema_format(const Json& format, std::string_view path) {
  if (!format.is_object()) return field_error(path, "must be an object");
  const FieldReader f(format, std::string(path));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> name, f.string("name"));
  if (!name || name->empty()) return invalid_argument("Missing required parameter: '" + f.path("name") + "'.");
  DI_RETURN_IF_ERROR(f.string("description").status());
  DI_RETURN_IF_ERROR(f.boolean("strict").status());
  const Json* schema = f.find("schema");
  if (schema == nullptr) return invalid_argument("Missing required parameter: '" + f.path("schema") + "'.");
  return json_schema_constraint(*schema, f.path("schema"));
}

}  // namespace deepinfer::recipe
