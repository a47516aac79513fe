// The text-processing stages of a Hugging Face tokenizer.json: normalizer, pre-tokenizer and
// decoder, each a flat list of steps (a "Sequence" is flattened when parsed).
//
// All three are built once from the JSON by parse() and are immutable afterwards; apply/split
// may run on many threads at once. Inputs are valid UTF-8 (HfPipeline replaces invalid bytes
// with U+FFFD first, as Python's decode(errors="replace") would before the text reaches
// Hugging Face's tokenizers). Errors name the file and the JSON field.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "deepinfer/status.h"

namespace deepinfer {

class Pcre2Regex;

// Normalizers: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Replace, Prepend, Strip, Sequence.
class HfNormalizer {
 public:
  // `json` may be null (no normalizer). `field` is the JSON path used in messages.
  static Result<HfNormalizer> parse(const nlohmann::json& json, const std::string& where, const std::string& field);

  HfNormalizer();
  HfNormalizer(HfNormalizer&&) noexcept;
  HfNormalizer& operator=(HfNormalizer&&) noexcept;
  ~HfNormalizer();

  bool empty() const { return steps_.empty(); }
  // *dropped_start (optional) is set when the result no longer begins with the input's first
  // character (Strip or a Replace by nothing removed it): Hugging Face then no longer counts
  // the text as starting at offset 0, which Metaspace's prepend_scheme "first" looks at.
  std::string apply(std::string_view text, bool* dropped_start = nullptr) const;

 private:
  struct Step;
  Status parse_into(const nlohmann::json& json, const std::string& where, const std::string& field);
  std::vector<Step> steps_;
};

// One pre-token: a view into the text (or into HfPreTokenizer::Arena storage) and whether it
// starts at offset 0 of the whole input (Metaspace's prepend_scheme "first" needs that).
struct PreToken {
  std::string_view text;
  bool at_start = false;
};

// Pre-tokenizers: Split (String or Regex pattern; Removed, Isolated, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Punctuation, Sequence.
class HfPreTokenizer {
 public:
  using Arena = std::deque<std::string>;  // owns text that steps rewrite (Metaspace, prefix spaces)

  static Result<HfPreTokenizer> parse(const nlohmann::json& json, const std::string& where, const std::string& field);

  HfPreTokenizer();
  HfPreTokenizer(HfPreTokenizer&&) noexcept;
  HfPreTokenizer& operator=(HfPreTokenizer&&) noexcept;
  ~HfPreTokenizer();

  // True when a ByteLevel step is present: the model then sees bytes as GPT-2 characters.
  bool byte_level() const { return byte_level_; }
  // True when the steps treat every piece alike wherever it starts (no Metaspace prefix, no
  // ByteLevel prefix space), so that cutting text at a piece boundary changes nothing.
  bool position_independent() const { return !steps_.empty() && position_independent_; }
  // Splits `input` (one piece) into pre-tokens appended to *out; rewritten text lives in *arena.
  void split(PreToken input, Arena* arena, std::vector<PreToken>* out) const;

 private:
  struct Step;
  Status parse_into(const nlohmann::json& json, const std::string& where, const std::string& field);
  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool position_independent_ = true;
};

// Decoders: ByteLevel, Metaspace, Replace, Fuse, Strip, ByteFallback, Sequence, or none (tokens
// joined with spaces, as Hugging Face does). Because
// deepinfer decodes token by token (streaming), the chain is reduced to what each token
// contributes plus a prefix trimmed from the start of the whole output; see piece().
class HfDecoder {
 public:
  static Result<HfDecoder> parse(const nlohmann::json& json, const std::string& where, const std::string& field);

  HfDecoder();
  HfDecoder(HfDecoder&&) noexcept;
  HfDecoder& operator=(HfDecoder&&) noexcept;
  ~HfDecoder();

  // The bytes a token with this vocabulary text contributes (possibly part of a UTF-8 sequence).
  std::string piece(std::string_view token) const;
  // Up to leading_strip_count() copies of leading_strip_char() are removed from the start of the
  // decoded text (Metaspace's dropped prefix space; Strip after Fuse).
  char leading_strip_char() const { return leading_strip_char_; }
  int leading_strip_count() const { return leading_strip_count_; }

 private:
  struct Step;
  Status parse_into(const nlohmann::json& json, const std::string& where, const std::string& field);
  std::vector<Step> steps_;
  char leading_strip_char_ = ' ';
  int leading_strip_count_ = 0;
  bool fused_ = false;
  bool join_with_spaces_ = false;  // no decoder in the file
};

}  // namespace deepinfer
