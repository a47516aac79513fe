#include "server/structured_fields.h"

#include <utility>
#include <vector>

#include "recipe/output_format.h"
#include "recipe/request_fields.h"

namespace deepinfer::server {

namespace {

using Json = nlohmann::ordered_json;
using recipe::FieldReader;

// Collects the constraints a request gives, refusing a second one.
class Found {
 public:
  Status add(std::string field, Constraint c) {
    if (!result_.field.empty()) {
      return invalid_argument("only one kind of structured output may be given, but the request has both '" +
                              result_.field + "' and '" + field + "'");
    }
    result_.field = std::move(field);
    result_.constraint = std::move(c);
    return Status();
  }
  StructuredField take() { return std::move(result_); }
  Constraint& constraint() { return result_.constraint; }

 private:
  StructuredField result_;
};

Constraint text_constraint(ConstraintKind kind, std::string text) {
  Constraint c;
  c.kind = kind;
  c.text = std::move(text);
  return c;
}

// vLLM takes a JSON Schema as an object or as its text.
Result<Constraint> schema_field(const Json& value, const std::string& path) {
  if (!value.is_string()) return recipe::json_schema_constraint(value, path);
  Json parsed = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalid_argument("'" + path + "' is not valid JSON");
  return recipe::json_schema_constraint(parsed, path);
}

Result<Constraint> choice_field(const Json& value, const std::string& path) {
  if (!value.is_array() || value.empty()) return invalid_argument("'" + path + "' must be a non-empty array of strings");
  Constraint c;
  c.kind = ConstraintKind::kChoice;
  for (const Json& item : value) {
    if (!item.is_string()) return invalid_argument("'" + path + "' must be a non-empty array of strings");
    c.choices.push_back(item.get<std::string>());
  }
  return c;
}

Status read_string_field(const FieldReader& f, const char* key, ConstraintKind kind, Found& found) {
  DI_ASSIGN_OR_RETURN(std::optional<std::string> text, f.string(key));
  if (text) DI_RETURN_IF_ERROR(found.add(f.path(key), text_constraint(kind, std::move(*text))));
  return Status();
}

Status read_vllm_object(const FieldReader& body, Found& found) {
  DI_ASSIGN_OR_RETURN(const Json* so, body.object("structured_outputs"));
  if (so == nullptr) return Status();
  const FieldReader f(*so, "structured_outputs");
  if (const Json* json = f.find("json")) {
    DI_ASSIGN_OR_RETURN(Constraint c, schema_field(*json, f.path("json")));
    DI_RETURN_IF_ERROR(found.add(f.path("json"), std::move(c)));
  }
  DI_RETURN_IF_ERROR(read_string_field(f, "regex", ConstraintKind::kRegex, found));
  DI_RETURN_IF_ERROR(read_string_field(f, "grammar", ConstraintKind::kGbnf, found));
  if (const Json* choice = f.find("choice")) {
    DI_ASSIGN_OR_RETURN(Constraint c, choice_field(*choice, f.path("choice")));
    DI_RETURN_IF_ERROR(found.add(f.path("choice"), std::move(c)));
  }
  DI_ASSIGN_OR_RETURN(std::optional<bool> json_object, f.boolean("json_object"));
  if (json_object.value_or(false)) DI_RETURN_IF_ERROR(found.add(f.path("json_object"), recipe::json_object_constraint()));
  for (const char* unsupported : {"structural_tag", "whitespace_pattern"}) {
    if (f.has(unsupported)) return invalid_argument("'" + f.path(unsupported) + "' is not supported");
  }
  DI_ASSIGN_OR_RETURN(std::optional<bool> compact, f.boolean("disable_any_whitespace"));
  found.constraint().compact_json = compact.value_or(false);
  return Status();
}

Status read_top_level(const FieldReader& f, Found& found) {
  for (const char* key : {"guided_json", "json_schema"}) {
    if (const Json* json = f.find(key)) {
      DI_ASSIGN_OR_RETURN(Constraint c, schema_field(*json, key));
      DI_RETURN_IF_ERROR(found.add(key, std::move(c)));
    }
  }
  DI_RETURN_IF_ERROR(read_string_field(f, "guided_regex", ConstraintKind::kRegex, found));
  DI_RETURN_IF_ERROR(read_string_field(f, "regex", ConstraintKind::kRegex, found));
  DI_RETURN_IF_ERROR(read_string_field(f, "guided_grammar", ConstraintKind::kGbnf, found));
  DI_RETURN_IF_ERROR(read_string_field(f, "ebnf", ConstraintKind::kGbnf, found));
  if (const Json* choice = f.find("guided_choice")) {
    DI_ASSIGN_OR_RETURN(Constraint c, choice_field(*choice, "guided_choice"));
    DI_RETURN_IF_ERROR(found.add("guided_choice", std::move(c)));
  }
  return Status();
}

// Completions' response_format, read as Chat reads it (JSON mode adds nothing to a raw prompt).
Status read_response_format(const FieldReader& body, Found& found) {
  DI_ASSIGN_OR_RETURN(const Json* rf, body.object("response_format"));
  if (rf == nullptr) return Status();
  const FieldReader f(*rf, "response_format");
  DI_ASSIGN_OR_RETURN(std::string type, f.string_or("type", "text"));
  if (type == "text") return Status();
  if (type == "json_object") return found.add("response_format", recipe::json_object_constraint());
  if (type == "json_schema") {
    const Json* format = f.find("json_schema");
    if (format == nullptr) return invalid_argument("Missing required parameter: 'response_format.json_schema'.");
    DI_ASSIGN_OR_RETURN(Constraint c, recipe::openai_json_schema_format(*format, "response_format.json_schema"));
    return found.add("response_format", std::move(c));
  }
  if (type == "regex") {
    DI_ASSIGN_OR_RETURN(std::optional<std::string> regex, f.string("regex"));
    if (!regex) return invalid_argument("Missing required parameter: 'response_format.regex'.");
    return found.add("response_format", text_constraint(ConstraintKind::kRegex, std::move(*regex)));
  }
  return invalid_argument("response_format.type: unknown variant `" + type +
                          "`, expected one of `json_object`, `json_schema`, `regex`, `text`");
}

}  // namespace

Result<StructuredField> read_structured_field(const Json& body, bool with_response_format) {
  const FieldReader f(body);
  Found found;
  DI_RETURN_IF_ERROR(read_vllm_object(f, found));
  DI_RETURN_IF_ERROR(read_top_level(f, found));
  if (with_response_format) DI_RETURN_IF_ERROR(read_response_format(f, found));
  return found.take();
}

Result<Constraint> merge_constraints(const Constraint& protocol, const std::string& protocol_field,
                                     const StructuredField& server) {
  if (server.constraint.kind == ConstraintKind::kNone) return protocol;
  if (protocol.kind != ConstraintKind::kNone) {
    return invalid_argument("only one kind of structured output may be given, but the request has both '" +
                            protocol_field + "' and '" + server.field + "'");
  }
  return server.constraint;
}

}  // namespace deepinfer::server
