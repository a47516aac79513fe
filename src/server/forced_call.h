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
#include "recipe/dsv4_encoding.h"

namespace deepinfer::server {

struct ForcedCall {
  std::string opening;   // the end of the prompt, and the start of the answer's text
  std::string closing;   // appended to the answer once the object the model writes closes
  Constraint constraint;
};

// INVALID_ARGUMENT when a tool's parameters are not a JSON Schema object.
Result<ForcedCall> forced_tagged_call(const std::vector<recipe::ToolDefinition>& tools);

// strict: true tools under tool_choice auto, for the tagged-JSON form: after the model opens a
// call ("<tool_call>", Constraint::start_after) the grammar writes {"name": ..., "arguments":
// ...} for one of the tools (a strict tool's arguments valid against its schema, the others' any
// object) and "</tool_call>"; further calls may follow, each "\n<tool_call>" then the same.
Result<Constraint> strict_tagged_calls(const std::vector<recipe::ToolDefinition>& tools);

// A forced call for DeepSeek V4 / V4.1, whose prompt already opens the DSML block (the recipe's
// prefill): a GBNF grammar of one or more invokes of the tools, joined by "\n", then the block's
// end, in the bytes the encoder writes for a call:
//
//   <｜DSML｜invoke name="get_weather">\n
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n
//   </｜DSML｜invoke>\n</｜DSML｜tool_calls>
//
// Parameters come in the schema's order, the required ones always, the others optionally. A
// plain string parameter (type string, at most minLength / maxLength besides annotations) is
// raw text (string="true"), an enum of strings its raw values; every other parameter is JSON
// valid against its schema (string="false", `%json`), with the parameters' root $defs and
// definitions carried along so that local $refs resolve. Raw text never holds "｜" (U+FF5C),
// which would let it write the end tag. INVALID_ARGUMENT when a name cannot be written in DSML
// (a quote in it) or a schema is not an object.
struct DsmlCallOptions {
  bool one_call = false;         // exactly one invoke (parallel tool calls off)
  // The model opens the block itself (strict tools under tool_choice auto): the grammar starts
  // after "<｜DSML｜{block}>" (Constraint::start_after) with the line break the encoder writes.
  bool opened_by_model = false;
  // Only tools with strict: true get their schemas; the others' invokes take any parameters.
  bool strict_only = false;
  // The prompt did not open the block and the answer must (Anthropic's tool_choice "any"): the
  // grammar starts with the block's opening as the encoder writes it ("\n\n<｜DSML｜{block}>\n").
  bool opens_block = false;
};
Result<Constraint> forced_dsml_call(const std::vector<recipe::ToolDefinition>& tools, recipe::PromptEncoding encoding,
                                    const DsmlCallOptions& options = {});

}  // namespace deepinfer::server
