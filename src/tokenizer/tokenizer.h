// Text <-> token ids for a model, built from the vocabulary a GGUF file carries.
//
// A Tokenizer is immutable once from_metadata returns: every method is const and may be called
// from many threads at once. An IncrementalDecoder belongs to one output stream (one thread at a
// time) and refers to its Tokenizer, which must outlive it.
//
// Two vocabulary kinds are supported (tokenizer.ggml.model):
//   "gpt2"   byte-level BPE with ranked merges and a regex pre-tokenizer chosen by
//            tokenizer.ggml.pre (SmolLM2, Llama 3, Qwen 2, ...);
//   "llama"  SentencePiece-style BPE over scores with <0xNN> byte fallback (Llama 2, Gemma).
// Ids agree with llama.cpp's tokenizer on the same GGUF vocabulary (tests/golden/tokenizer).
//
// Special tokens in text: user-defined entries (type 4, e.g. Gemma's "\n\n" or "<table>") are
// always recognised, as SentencePiece and llama.cpp do. Control tokens ("<|im_start|>",
// "<start_of_turn>") are recognised only with EncodeOptions::parse_special, which is for trusted
// template text: text a user typed must never become a control token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "deepinfer/status.h"
#include "model/loader/metadata.h"

namespace deepinfer {

struct Vocab;
class BpeModel;
class SpmModel;
class RegexSplitter;
class SpecialTokenMatcher;

struct EncodeOptions {
  bool add_bos = false;        // prepend BOS (when the vocabulary has one)
  bool parse_special = false;  // text spelling a control/special token becomes that token
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model,pre,tokens,scores,token_type,merges,bos_token_id,eos_token_id,
  // unknown_token_id,padding_token_id,add_bos_token,add_space_prefix} and tokenizer.chat_template.
  // Errors name the key: NOT_FOUND for a missing required key, INVALID_ARGUMENT for a wrong type,
  // a length that disagrees with tokenizer.ggml.tokens or an id out of range, UNIMPLEMENTED for
  // a tokenizer.ggml.model other than "gpt2" and "llama".
  static Result<std::unique_ptr<Tokenizer>> from_metadata(const Metadata& metadata);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  int64_t n_vocab() const;

  // Any bytes are accepted; invalid UTF-8 is encoded byte by byte and survives decode's
  // round trip only as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const;

  // Valid UTF-8: the pieces' bytes concatenated, invalid sequences replaced by U+FFFD. Control,
  // unknown and unused tokens render as empty text (llama.cpp's default); so do ids outside
  // [0, n_vocab).
  std::string decode(std::span<const int32_t> ids) const;

  // The bytes one token contributes to decode() (possibly part of a UTF-8 sequence).
  std::string token_piece(int32_t id) const;
  // The raw vocabulary string (for --pieces and debugging); empty for an id out of range.
  std::string token_text(int32_t id) const;

  int32_t bos_id() const { return bos_id_; }  // -1 when absent
  int32_t eos_id() const { return eos_id_; }  // -1 when absent
  bool add_bos_by_default() const { return add_bos_; }
  // EOS, tokenizer.ggml.eot_token_id / eom_token_id, and control tokens that end a turn
  // (<|im_end|>, <|endoftext|>, <end_of_turn>, <|eot_id|>, ...).
  bool is_end_of_generation(int32_t id) const;
  bool is_control(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;  // exact vocabulary lookup
  const std::string& chat_template() const { return chat_template_; }

 private:
  enum class Kind { kByteLevelBpe, kSentencePiece };
  Tokenizer();
  void encode_plain(std::string_view text, bool space_prefix, std::vector<int32_t>* out) const;

  Kind kind_ = Kind::kByteLevelBpe;
  std::unique_ptr<Vocab> vocab_;
  std::vector<std::string> pieces_;  // [n_vocab] what each token decodes to
  std::unique_ptr<BpeModel> bpe_;             // kByteLevelBpe
  std::unique_ptr<RegexSplitter> splitter_;   // kByteLevelBpe
  std::unique_ptr<SpmModel> spm_;             // kSentencePiece
  std::unique_ptr<SpecialTokenMatcher> specials_;
  std::unordered_set<int32_t> end_of_generation_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unknown_id_ = -1;
  int32_t padding_id_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;
  std::string chat_template_;
};

// Streaming detokenization: feed ids one at a time; each push returns only complete UTF-8 text
// (a character split across byte tokens is held until its last byte arrives). The concatenation
// of all pushes and finish() equals decode() of all the ids.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(int32_t id);
  std::string finish();  // whatever is left (an incomplete sequence becomes U+FFFD)

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence at the end of the output so far
};

}  // namespace deepinfer
