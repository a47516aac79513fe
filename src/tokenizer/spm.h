// SentencePiece-style BPE over scores (GGUF tokenizer.ggml.model = "llama", e.g. Llama 2 and
// Gemma): the text, spaces already written as U+2581 '▁', starts as one symbol per UTF-8
// character; then the adjacent pair whose concatenation is a vocabulary entry with the highest
// score is merged, leftmost first among equal scores, until no adjacent pair forms an entry.
// A final symbol that is not an entry (a character the vocabulary lacks) falls back to byte
// tokens <0xNN>, one per byte. Immutable after construction; encode may run on many threads.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace deepinfer {

class SpmModel {
 public:
  explicit SpmModel(const Vocab& vocab);

  // Appends the ids for text (already escaped: ' ' -> "▁").
  void encode(std::string_view text, std::vector<int32_t>* out) const;

  // The token for one byte: <0xNN>, else the byte as a one-character entry, else unknown (-1 if none).
  int32_t byte_token(uint8_t byte) const { return byte_token_[byte]; }

 private:
  const Vocab* vocab_;
  std::array<int32_t, 256> byte_token_{};
};

}  // namespace deepinfer
