// The per-request matcher: advances byte by byte through a CompiledGrammar, says which tokens of
// the vocabulary may come next, and can go back.
//
//   Matcher m(compiled);
//   m.fill_mask(bits);          // bits[id / 64] >> (id % 64) & 1: token id allowed next
//   m.accept_token(id);         // false: refused (the state is unchanged)
//   m.rollback(2);              // undo the last two accepted tokens (speculative decoding)
//   Matcher draft = m;          // fork: an independent copy
//
// Termination: the stop tokens (TokenIndex::stop_ids) are allowed exactly where the grammar may
// end, and once one is accepted nothing else is. A token with no bytes that is not a stop token
// is never allowed.
//
// One thread at a time. fill_mask() and accept_token() do not allocate once the matcher's arrays
// have grown to the depth of the text (the first tokens pay for that growth).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/stacks.h"

namespace deepinfer::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  bool accept_token(int32_t id);
  // The bytes as one step (forced text, tests); false and unchanged when refused.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last `n_steps` accepted tokens or byte strings (all of them at most).
  void rollback(int32_t n_steps);
  int32_t n_steps() const { return static_cast<int32_t>(steps_.size()); }

  bool can_end() const { return !terminated_ && stacks_.can_end(); }
  bool is_terminated() const { return terminated_; }
  // May end here and no byte can follow: only a stop token is allowed.
  bool is_complete() const;
  // The bytes every continuation starts with, up to `max_bytes`: where each set of stacks
  // allows exactly one byte and the grammar may not end (a JSON key after its opening quote, the
  // rest of an enum value). The state is unchanged. Empty when the next byte is a choice.
  std::string forced_bytes(size_t max_bytes);

  // `mask` has TokenIndex::n_words() words; every bit is written.
  void fill_mask(std::span<uint64_t> mask);
  // The same mask computed by walking the whole trie from the full set (no token classes): the
  // reference fill_mask is tested against, and a measure of what the classes save.
  void fill_mask_by_walk(std::span<uint64_t> mask);

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Step {
    uint32_t n_sets_before;
    bool stop;
  };
  void check_uncertain(uint32_t node, const TokenClass& cls, std::span<uint64_t> mask);
  void add_stops(std::span<uint64_t> mask) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  Stacks stacks_;
  std::vector<Step> steps_;
  bool terminated_ = false;
};

inline bool mask_has(std::span<const uint64_t> mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }
inline void mask_set(std::span<uint64_t> mask, int32_t id) { mask[id >> 6] |= uint64_t{1} << (id & 63); }

}  // namespace deepinfer::grammar
