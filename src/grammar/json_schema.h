// JSON Schema (draft 2020-12, and the draft 4/6/7 keywords real schemas use) lowered to the
// grammar IR: the grammar's language is the compact-or-spaced JSON texts that validate.
//
// What is supported, what is refused, and why, is listed in docs/structured-output.md. The rule:
// a keyword the grammar cannot express exactly is an INVALID_ARGUMENT naming the keyword and
// where it is ("oneOf at /properties/pet: branches 0 and 1 may overlap"), never a looser
// grammar. Annotations (title, description, examples, ...) and unknown keywords are ignored,
// as the specification says. Property order is the order the schema declares.
//
// The schema is the grammar's source text, so it is parsed here (as a GBNF grammar is parsed by
// gbnf.cpp): nothing JSON leaves this file.
#pragma once

#include <cstdint>
#include <string_view>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct JsonSchemaOptions {
  // Whitespace between JSON tokens: none (compact, what most serializers write and the
  // cheapest masks), or up to max_whitespace bytes of [ \t\n] at each place.
  bool compact = false;
  int32_t max_whitespace = 8;
};

Result<Grammar> json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options);

}  // namespace deepinfer::grammar
