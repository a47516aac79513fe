// Regular expressions (the ECMAScript subset JSON Schema's `pattern` uses) lowered to the
// grammar IR.
//
// Supported: literals (UTF-8), `.`, classes `[...]` / `[^...]` with ranges, the escapes \d \w \s
// \D \W \S \t \n \r \f \v \0 \xHH \uHHHH (surrogate pairs joined) \u{H...} \cX and escaped
// punctuation, groups `(...)` `(?:...)` `(?<name>...)`, alternation, the quantifiers * + ? {n}
// {n,} {n,m} (lazy forms match the same language), and the anchors ^ and $ at the start and end
// of a top-level alternative. Refused with INVALID_ARGUMENT naming the construct: lookaround,
// backreferences, \b \B, Unicode property escapes, anchors elsewhere, flags.
//
// Two lowerings of the same language:
//   kRaw         the matched text as UTF-8 bytes;
//   kJsonString  the text as the inside of a JSON string literal, as a compact serializer
//                writes it (`"` -> \", `\` -> \\, \b \f \n \r \t, other controls \u00XX,
//                everything else as UTF-8), for `pattern` and `format` in JSON Schema.
#pragma once

#include <string_view>

#include "deepinfer/status.h"
#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {

enum class RegexEncoding { kRaw, kJsonString };

enum class RegexMatch {
  kFull,    // the whole text matches (^ and $ at the ends are allowed and change nothing)
  kSearch,  // JSON Schema: some substring matches, unless ^ / $ anchor an end
};

Result<ExprId> compile_regex(Grammar& g, std::string_view pattern, RegexEncoding encoding, RegexMatch match);

// A set of code points in `encoding` (one character of it).
ExprId codepoints_expr(Grammar& g, const CodepointSet& set, RegexEncoding encoding);

// Any one character in `encoding`.
ExprId any_char_expr(Grammar& g, RegexEncoding encoding);

}  // namespace deepinfer::grammar
