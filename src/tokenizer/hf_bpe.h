// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}).
//
// A word (one pre-token) starts as one symbol per byte when the tokenizer is byte-level (the
// pre-tokenizer chain holds ByteLevel: bytes are looked up as their GPT-2 characters), else as
// one symbol per UTF-8 character, spelled with continuing_subword_prefix when not first and
// end_of_word_suffix when last. A character the vocabulary lacks becomes <0xNN> byte tokens
// (byte_fallback), else unk_token (consecutive unknowns fused when fuse_unk), else is dropped,
// as Hugging Face does. Then the adjacent pair with the lowest merge rank merges, leftmost first
// among equal ranks. With ignore_merges a word that is itself a vocabulary entry is that token.
//
// Immutable after create(); encode_word may run on many threads at once. Each thread keeps a
// bounded cache of recent words' ids (natural text repeats words), tagged with the model's
// instance number so that a cache never serves another model.
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

struct HfBpeOptions {
  bool byte_level = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class HfBpeModel {
 public:
  // merges: (left, right) symbol texts, highest priority first. `where` names the file for
  // errors: INVALID_ARGUMENT naming model.merges[i] when a side or the merged text is not in the
  // vocabulary (Hugging Face refuses such files too).
  static Result<HfBpeModel> create(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                   const HfBpeOptions& options, const std::string& where);

  // Appends the ids of one pre-token. For a byte-level model `word` is raw bytes.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>* ids) const;
  void merge_word(std::string_view word, std::vector<int32_t>* out) const;

  const Vocab* vocab_ = nullptr;
  uint64_t instance_ = 0;  // unique per create() call; keys the per-thread word cache
  HfBpeOptions options_;
  std::array<int32_t, 256> byte_symbol_{};    // byte-level: byte -> token of its GPT-2 character
  std::array<int32_t, 256> fallback_token_{};  // byte_fallback: byte -> <0xNN>, -1 when absent
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
};

}  // namespace deepinfer
