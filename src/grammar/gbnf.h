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

#include <cstdint>
#include <optional>
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

// Lexing both dialects share. The code point of the UTF-8 character at text[*pos] (the lead
// byte's length, not checked further: grammar text is the client's, and a malformed byte only
// changes which character it names); *pos moves past it. nullopt: no character starts there.
std::optional<uint32_t> read_utf8_char(std::string_view text, size_t* pos);
// `digits` hex digits at text[*pos]; *pos moves past them. nullopt: one is not a hex digit.
std::optional<uint32_t> read_hex(std::string_view text, size_t* pos, int digits);

}  // namespace deepinfer::grammar
