// The structured-output fields an OpenAI-compatible server reads beyond the protocols' own
// (docs/structured-output.md): vLLM's `structured_outputs` object (json, regex, choice,
// grammar, json_object, disable_any_whitespace) and its older top-level `guided_json`,
// `guided_regex`, `guided_choice`, `guided_grammar`; SGLang's top-level `json_schema`, `regex`
// and `ebnf`; and, for /v1/completions, which has no recipe adapter, `response_format` as
// Chat Completions reads it. A request gives at most one of them; two are a 400 naming both.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer::server {

struct StructuredField {
  Constraint constraint;  // kNone when the request gives none
  std::string field;      // the field it came from, for messages ("structured_outputs.json")
};

// `with_response_format`: read `response_format` too (Completions).
Result<StructuredField> read_structured_field(const nlohmann::ordered_json& body, bool with_response_format);

// The one constraint of a request that may carry a protocol's (response_format) and a server
// field: INVALID_ARGUMENT when both are given.
Result<Constraint> merge_constraints(const Constraint& protocol, const std::string& protocol_field,
                                     const StructuredField& server);

}  // namespace deepinfer::server
