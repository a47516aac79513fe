// Byte-level BPE (GPT-2 style, GGUF tokenizer.ggml.model = "gpt2"): one pre-token's bytes start
// as one symbol per byte, then the adjacent pair with the lowest merge rank is merged, leftmost
// first among equal ranks, until no pair has a merge.
//
// Symbols are integers: ids below n_vocab are tokens; larger ids name strings that merges
// produce but the vocabulary lacks (a well-formed vocabulary has none). Such a symbol left over
// at the end is emitted as its bytes' tokens. Immutable after create(); encode_word may run on
// many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

class BpeModel {
 public:
  // merges: "left right" strings, highest priority first (tokenizer.ggml.merges).
  // INVALID_ARGUMENT naming the key and index for a merge without a separating space.
  static Result<BpeModel> create(const Vocab& vocab, const std::vector<std::string>& merges);

  // Appends the token ids of one pre-token (raw bytes, any content).
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of left+right
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  const Vocab* vocab_ = nullptr;
  std::array<int32_t, 256> byte_symbol_{};  // byte -> symbol of its byte-level character
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
};

}  // namespace deepinfer
