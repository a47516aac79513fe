// Sets of Unicode code points, and their lowering to UTF-8 byte sequences in the grammar IR
// (the split of a code point range into runs that share a byte-length and leading bytes, after
// Russ Cox's utf8-ranges).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent closed ranges.
class CodepointSet {
 public:
  void add(uint32_t cp) { add_range(cp, cp); }
  void add_range(uint32_t lo, uint32_t hi);
  void add_set(const CodepointSet& other);
  CodepointSet complement() const;  // within [0, kMaxCodepoint]
  CodepointSet minus(const CodepointSet& other) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// One code point in UTF-8 (surrogates are encoded as they are; callers exclude them).
std::string utf8_encode(uint32_t cp);

// The bytes of every code point of `set` except the surrogates D800-DFFF, as an alternation of
// byte-range sequences.
ExprId utf8_expr(Grammar& g, const CodepointSet& set);

}  // namespace deepinfer::grammar
