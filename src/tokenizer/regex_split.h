// Pre-tokenization: splitting text into pieces with a chain of Unicode regular expressions
// (PCRE2 with UTF and Unicode properties) before byte-level BPE sees it.
//
// Each pattern of the chain splits every piece the previous one produced: the matches become
// pieces and so does the text between matches, so no byte is ever dropped. A piece is matched as
// a subject of its own, so a lookahead such as \s+(?!\S) sees the end of the piece as the end of
// the text (what Hugging Face's Sequence pre-tokenizer and llama.cpp do). Invalid UTF-8 never
// matches a pattern and so ends up in the text between matches, byte for byte.
//
// A RegexSplitter is immutable after create(); split() may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// The pattern chain for a GGUF tokenizer.ggml.pre name, or NOT_FOUND for a name this build
// does not know.
Result<std::vector<std::string>> pre_tokenizer_patterns(std::string_view pre);

class RegexSplitter {
 public:
  // INVALID_ARGUMENT when a pattern does not compile (the message quotes it).
  static Result<RegexSplitter> create(const std::vector<std::string>& patterns);

  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Appends the pieces of text, in order, as views into text; their concatenation is text.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  struct Pattern;
  RegexSplitter();
  void split_one(const Pattern& pattern, std::string_view text, std::vector<std::string_view>* pieces) const;

  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace deepinfer
