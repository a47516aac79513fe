// Byte DFAs (grammar.h ByteDfa) of call-free expressions, and their boolean combinations: what
// the JSON Schema front end needs where a schema intersects or complements string languages
// (`pattern` beside `minLength`, `patternProperties` keys, `not` of a pattern). The results are
// exact; a product past `max_states` is RESOURCE_EXHAUSTED, never an approximation.
#pragma once

#include <cstdint>
#include <string_view>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr uint32_t kMaxDfaStates = 100000;

// The DFA of `expr`, an expression of `g` without rule calls (INVALID_ARGUMENT if it has one).
Result<ByteDfa> dfa_of(const Grammar& g, ExprId expr, uint32_t max_states = kMaxDfaStates);

enum class DfaOp {
  kAnd,     // in both
  kAndNot,  // in the first, not in the second
  kOr,      // in either
};
Result<ByteDfa> combine(const ByteDfa& a, const ByteDfa& b, DfaOp op, uint32_t max_states = kMaxDfaStates);

// The strings of `d` made of min_len to max_len (-1: any number) strings of `one_char`, a
// prefix-free language (one character in some encoding).
Result<ByteDfa> with_length(const ByteDfa& d, const ByteDfa& one_char, int64_t min_len, int64_t max_len,
                            uint32_t max_states = kMaxDfaStates);

bool dfa_accepts(const ByteDfa& d, std::string_view text);
inline bool dfa_empty(const ByteDfa& d) { return d.n_states() == 0; }

}  // namespace deepinfer::grammar
