// Finding special tokens spelled in text before the text is tokenized, e.g. "<|im_start|>" or
// Gemma's "\n\n" and "<table>" entries.
//
// Which tokens count is the caller's choice per call (a mask of token types): user-defined
// entries are matched in any text, control tokens only in trusted template text.
// Overlaps are resolved as llama.cpp does, so ids agree with it: longer tokens claim their
// occurrences first (left to right), shorter ones only match in what is left.
// Immutable after construction; partition may run on many threads at once.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace deepinfer {

struct Fragment {
  int32_t token_id;       // a matched special token, or -1 for plain text
  std::string_view text;  // view into the partitioned text
};

// A bit per TokenType: type_bit(TokenType::kControl) | ...
constexpr uint32_t type_bit(TokenType type) { return 1u << static_cast<int32_t>(type); }

class SpecialTokenMatcher {
 public:
  // Indexes every token whose type is in `types` (non-empty texts only).
  SpecialTokenMatcher(const Vocab& vocab, uint32_t types);

  bool empty() const { return n_tokens_ == 0; }

  // Splits text into plain fragments and special tokens whose type is in `types` (a subset of
  // the constructor's). Fragments are in order and cover all of text; no fragment is empty.
  void partition(std::string_view text, uint32_t types, std::vector<Fragment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token_id = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  const Vocab* vocab_;
  std::vector<Node> nodes_;  // [0] is the root
  int32_t n_tokens_ = 0;
  uint32_t types_present_ = 0;  // type bits of the indexed tokens
};

}  // namespace deepinfer
