// The structured-output fields of the three protocols, read into the engine's Constraint
// (docs/structured-output.md): Chat Completions' `response_format`, Responses' `text.format`,
// and Messages' `output_format` / `output_config.format`. They never change the prompt
// (deepseek-recipe renders only JSON mode into it); the constraint is what makes the output
// follow them. Errors are 400 messages naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer::recipe {

// Any JSON object: JSON mode (`json_object`), as vLLM constrains it.
Constraint json_object_constraint();

// A JSON Schema given at `path` (an object, or `true` for any JSON value). The constraint's text
// is the schema's compact dump, properties in the order the request declared them.
Result<Constraint> json_schema_constraint(const nlohmann::ordered_json& schema, std::string_view path);

// OpenAI's json_schema format object at `path`: `name` (required), `schema` (required),
// `description` and `strict`. Chat nests it (`response_format.json_schema`), Responses does not
// (`text.format`). `strict` is read and checked; the schema is enforced either way, as vLLM does.
Result<Constraint> openai_json_schema_format(const nlohmann::ordered_json& format, std::string_view path);

}  // namespace deepinfer::recipe
