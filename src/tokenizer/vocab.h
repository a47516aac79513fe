// The token table shared by the tokenizer's parts: texts, scores and types as GGUF stores them
// (tokenizer.ggml.tokens / scores / token_type), plus an exact text -> id index.
// Built once by Tokenizer::from_metadata and read-only afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer {

// tokenizer.ggml.token_type values (SentencePiece's piece types).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  Vocab() = default;
  // text_to_id holds views into the strings of `texts`; a move keeps them (the strings stay where
  // they are), a copy would not.
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;

  std::vector<std::string> texts;  // [n_vocab] raw vocabulary strings
  std::vector<float> scores;       // [n_vocab] SentencePiece log-probabilities; 0 when absent
  std::vector<TokenType> types;    // [n_vocab]
  // Views into `texts`, which never changes after construction. Where two ids share a text the
  // lower id wins, so lookups are deterministic.
  std::unordered_map<std::string_view, int32_t> text_to_id;
  int32_t unknown_id = -1;

  int32_t size() const { return static_cast<int32_t>(texts.size()); }
  int32_t find(std::string_view text) const {
    auto it = text_to_id.find(text);
    return it == text_to_id.end() ? -1 : it->second;
  }
  void build_index() {
    text_to_id.clear();
    text_to_id.reserve(texts.size());
    for (int32_t id = 0; id < size(); ++id) text_to_id.emplace(texts[id], id);
  }
};

}  // namespace deepinfer
