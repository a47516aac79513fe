// A forced tool call (tool_choice `required`, or one named function) for models that write the
// tagged-JSON form `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`: the prompt
// opens the call, and a grammar makes the rest a call of one of the tools with arguments valid
// against its parameter schema.
//
//   one tool:    opens `<tool_call>\n{"name": "NAME", "arguments": `; the model writes the
//                arguments (the tool's schema); the answer closes with `}\n</tool_call>`.
//   several:     opens `<tool_call>\n`; the model writes {"name": N, "arguments": ...} for one
//                of them (an anyOf of one object schema per tool); closes with `\n</tool_call>`.
//
// A parameter schema without a `type` is given `"type": "object"` (arguments are an object).
// With several tools, `$ref`s inside a tool's schema are rebased onto where the schema sits in
// the combined one, so references into its own `$defs` still resolve.
#pragma once

#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"
#include "recipe/conversation.h"

namespace deepinfer::server {

struct ForcedCall {
  std::string opening;   // the end of the prompt, and the start of the answer's text
  std::string closing;   // appended to the answer once the object the model writes closes
  Constraint constraint;
};

// INVALID_ARGUMENT when a tool's parameters are not a JSON Schema object.
Result<ForcedCall> forced_tagged_call(const std::vector<recipe::ToolDefinition>& tools);

}  // namespace deepinfer::server
