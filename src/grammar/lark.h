// Lark-style EBNF (the dialect of Python's Lark parser, which llguidance and OpenAI's grammar
// tools also take), lowered to the grammar IR.
//
//   start: pair ("," pair)*
//   pair: KEY ":" value
//   ?value: NUMBER | ESCAPED_STRING | "true"i | "[" [value ("," value)*] "]"
//   KEY: /[a-z_]+/
//   %import common.NUMBER
//   %import common (ESCAPED_STRING, WS)
//   %ignore WS
//
// Definitions `name: expansions`, one per line; a line starting with `|` continues the one
// before, and so does anything inside ( ) or [ ]. Lowercase names are rules, uppercase names
// terminals (`?`/`!` before a rule's name, `.N` priorities and `-> alias` are accepted and
// change nothing a recognizer sees). Items: "literal" (Python escapes; `i` after it: ASCII
// letters in either case), "a".."z" (a range of single characters), /regex/ (the JSON Schema
// regex dialect, regex.h, matching the whole token; no flags), names, ( ) groups, [ ] and ?
// optional, * and +, `~ n` and `~ n..m` repetitions, `|` alternation, // comments.
// `%import common.NAME [-> ALIAS]` and `%import common (A, B)` bring in Lark's common
// terminals (WS, WS_INLINE, NEWLINE, NUMBER, SIGNED_NUMBER, INT, SIGNED_INT, FLOAT, DECIMAL,
// DIGIT, HEXDIGIT, LETTER, WORD, CNAME, ESCAPED_STRING, ...). `%ignore ITEM` allows the item
// (repeated) between any two items of a rule and around the start rule, where Lark's lexer
// would skip it; inside terminals nothing is ignored. The `%json {schema}` extension (as in
// gbnf.h and llguidance's Lark) matches JSON valid against the schema. The start rule is
// `start`. Templates, `%declare`, `%override`, `%extend`, imports from other modules and regex
// flags are refused with the line. Errors are INVALID_ARGUMENT naming the line.
#pragma once

#include <string_view>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

Result<Grammar> parse_lark(std::string_view text);

// Whether an EBNF text is in the Lark dialect rather than GBNF: GBNF defines with `::=`, Lark
// with `name:`. What the server's `grammar` fields use to tell them apart.
bool looks_like_lark(std::string_view text);

}  // namespace deepinfer::grammar
