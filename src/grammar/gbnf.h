// GBNF, the EBNF dialect of llama.cpp's grammars, lowered to the grammar IR.
//
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws     ::= [ \t\n]*   # comment
//
// Rules `name ::= alternatives`; a rule's body runs until the next `name ::=`. Terminals:
// "literal" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), [classes] and [^negated] with
// ranges, `.` (any character); grouping ( ), alternation |, quantifiers * + ? {m} {m,} {m,n};
// # comments. Characters are Unicode code points matched as UTF-8. The start rule is `root`.
// An extension, as llguidance's Lark has it: `%json {schema}` matches the JSON texts valid
// against the JSON Schema object (json_schema.h, whitespace allowed), e.g.
//   root ::= "<args>" %json {"type": "object", "required": ["city"]} "</args>"
// which is how a tool-call format wraps JSON arguments in tags of its own; and `%pattern "re"`
// matches the raw texts a JSON Schema `pattern` accepts (regex.h, search semantics).
// Errors are INVALID_ARGUMENT with the line; token references (<[id]>) are refused.
#pragma once

#include <string_view>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

Result<Grammar> parse_gbnf(std::string_view text);

// The `%json {schema}` extension both EBNF dialects share (GBNF here, Lark in lark.h): at
// text[*pos] a JSON Schema object, lowered by json_schema_to_grammar and imported into g under
// names neither dialect can write; *pos moves past the object, *n_embedded counts the schemas
// embedded so far (their names' suffix).
Result<ExprId> embed_json_schema(Grammar& g, std::string_view text, size_t* pos, int* n_embedded);

}  // namespace deepinfer::grammar
