// Text <-> token ids for a model, built from the vocabulary a GGUF file carries or from a
// Hugging Face tokenizer.json (+ tokenizer_config.json).
//
// A Tokenizer is immutable once its factory returns: every method is const and may be called
// from many threads at once (a tokenizer.json BPE keeps a per-thread cache of recent words,
// invisible to callers). An IncrementalDecoder belongs to one output stream (one thread at a
// time) and refers to its Tokenizer, which must outlive it.
//
// Two vocabulary kinds are supported (tokenizer.ggml.model):
//   "gpt2"   byte-level BPE with ranked merges and a regex pre-tokenizer chosen by
//            tokenizer.ggml.pre (SmolLM2, Llama 3, Qwen 2, ...);
//   "llama"  SentencePiece-style BPE over scores with <0xNN> byte fallback (Llama 2, Gemma).
// Ids agree with llama.cpp's tokenizer on the same GGUF vocabulary (tests/golden/tokenizer).
// A tokenizer.json gives ids that agree with Hugging Face's `tokenizers` (see hf_pipeline.h for
// the supported components; tests/golden/tokenizer/hf_*.json).
//
// Special tokens in text: user-defined entries (type 4, e.g. Gemma's "\n\n" or "<table>") are
// always recognised, as SentencePiece and llama.cpp do. Control tokens ("<|im_start|>",
// "<start_of_turn>") are recognised only with EncodeOptions::parse_special, which is for trusted
// template text: text a user typed must never become a control token. For a tokenizer.json the
// control set is every added token marked special plus every added token the model's own
// vocabulary lacks (DeepSeek's "<｜User｜>" is marked special=false but is a marker); other added
// tokens behave as user-defined ones. With parse_special every added token is matched, which is
// what Hugging Face's encode() does. decode() renders added tokens marked special as nothing
// (skip_special_tokens=True) and every other token through the file's decoder.
//
// Injection-safe encoding: encode_segments() takes the prompt as a list of segments, each either
// text or one explicit token id. Special-token spellings inside a text segment are always
// encoded as ordinary text (as with parse_special=false), so the only control tokens in the
// result are those the caller put there by id. A chat template renderer emits its markers as
// token segments and the user's content as text segments:
//   std::vector<Segment> parts = {Segment::of_token(user_id), Segment::of_text(user_text),
//                                 Segment::of_token(assistant_id)};
//   DI_ASSIGN_OR_RETURN(auto ids, tokenizer.encode_segments(parts, {.add_bos = true}));
//
// Invalid UTF-8 in text: a GGUF byte-level tokenizer encodes the bad bytes one by one; a
// tokenizer.json first replaces each invalid sequence by U+FFFD (what Python's
// bytes.decode(errors="replace") hands to Hugging Face's tokenizers, which take only valid text).
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
class HfPipeline;
class ThreadPool;

struct EncodeOptions {
  bool add_bos = false;        // prepend BOS (when the vocabulary has one)
  bool parse_special = false;  // text spelling a control/special token becomes that token
};

// One part of the input of Tokenizer::encode_segments: text, or one token given by id.
struct Segment {
  std::string_view text;   // when token_id < 0; must outlive the call
  int32_t token_id = -1;   // >= 0: this token, emitted as it is

  static Segment of_text(std::string_view t) { return {t, -1}; }
  static Segment of_token(int32_t id) { return {std::string_view(), id}; }
};

struct SegmentOptions {
  bool add_bos = false;  // as EncodeOptions::add_bos
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model,pre,tokens,scores,token_type,merges,bos_token_id,eos_token_id,
  // unknown_token_id,padding_token_id,add_bos_token,add_space_prefix} and tokenizer.chat_template.
  // Errors name the key: NOT_FOUND for a missing required key, INVALID_ARGUMENT for a wrong type,
  // a length that disagrees with tokenizer.ggml.tokens or an id out of range, UNIMPLEMENTED for
  // a tokenizer.ggml.model other than "gpt2" and "llama".
  static Result<std::unique_ptr<Tokenizer>> from_metadata(const Metadata& metadata);

  // A Hugging Face tokenizer.json. Errors name the file and the JSON field: INVALID_ARGUMENT for
  // a missing or malformed field (no model, merges naming tokens the vocabulary lacks),
  // UNIMPLEMENTED for a component type this build does not support, NOT_FOUND for no file.
  static Result<std::unique_ptr<Tokenizer>> from_tokenizer_json(const std::string& path);
  // A directory with tokenizer.json and optionally tokenizer_config.json (bos_token, eos_token,
  // add_bos_token, chat_template) and chat_template.jinja.
  static Result<std::unique_ptr<Tokenizer>> from_hf_dir(const std::string& dir);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  int64_t n_vocab() const;

  // Any bytes are accepted; invalid UTF-8 is encoded byte by byte and survives decode's
  // round trip only as U+FFFD.
  // With a tokenizer.json, add_bos adds what its post-processor puts around a sequence
  // (Hugging Face's add_special_tokens=True); without a post-processor template, BOS only when
  // tokenizer_config.json says add_bos_token (DeepSeek V4: nothing; its template spells BOS).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const;

  // The same ids as encode(text, options), computed on `pool` (one caller at a time, as the
  // pool requires). Long text is cut where a newline is followed by an ASCII letter and the
  // pre-tokenizer, run on a window around the cut, splits the two sides apart into the same
  // pieces as the whole (a piece boundary alone is not enough: GPT-2's \s+(?!\S) looks ahead);
  // no special token spans such a point, and BPE never merges across pieces. The text becomes
  // up to 16 parts per thread, which the threads take as they go, so they finish together
  // even when parts differ in cost. Falls back to encode() for SentencePiece
  // vocabularies (their merges cross any boundary) and for tokenizer.json files with a
  // normalizer, a position-dependent pre-tokenizer (Metaspace, ByteLevel add_prefix_space) or
  // added tokens with lstrip/rstrip/single_word.
  std::vector<int32_t> encode_parallel(std::string_view text, const EncodeOptions& options, ThreadPool& pool) const;
  bool can_encode_in_parallel() const { return parallel_safe_; }  // false: encode_parallel == encode

  // Injection-safe encoding (see the top of this file). INVALID_ARGUMENT for a token id outside
  // [0, n_vocab).
  Result<std::vector<int32_t>> encode_segments(std::span<const Segment> segments, const SegmentOptions& options) const;

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
  friend class IncrementalDecoder;  // reads the leading strip
  enum class Kind { kByteLevelBpe, kSentencePiece, kHuggingFace };
  Tokenizer();
  void encode_plain(std::string_view text, bool space_prefix, std::vector<int32_t>* out) const;
  // One text fragment; after_special: it follows a token (or starts the input).
  void encode_text(std::string_view text, bool parse_special, bool first, bool after_special,
                   std::vector<int32_t>* out) const;
  void add_prefix(std::vector<int32_t>* out, bool add_bos) const;
  void init_parallel_safety();
  void add_end_of_turn_tokens(const Vocab& vocab);
  void split_views(std::string_view text, std::vector<std::string_view>* pieces) const;
  bool cut_keeps_pieces(std::string_view window, size_t pos) const;
  size_t first_cut(std::string_view text, size_t from, size_t limit) const;
  void add_suffix(std::vector<int32_t>* out, bool add_bos) const;

  Kind kind_ = Kind::kByteLevelBpe;
  std::unique_ptr<Vocab> vocab_;
  std::vector<std::string> pieces_;  // [n_vocab] what each token decodes to
  std::unique_ptr<BpeModel> bpe_;             // kByteLevelBpe
  std::unique_ptr<RegexSplitter> splitter_;   // kByteLevelBpe
  std::unique_ptr<SpmModel> spm_;             // kSentencePiece
  std::unique_ptr<SpecialTokenMatcher> specials_;
  std::unique_ptr<HfPipeline> hf_;            // kHuggingFace
  char leading_strip_char_ = ' ';             // decode drops up to this many of this char
  int leading_strip_count_ = 0;               // from the start of the text (HF decoders)
  bool parallel_safe_ = false;                // encode_parallel may cut text (see there)
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
  int stripped_ = 0;     // leading characters dropped so far (tokenizer's leading strip)
  bool started_ = false; // some text has been emitted (leading strip is over)
};

}  // namespace deepinfer
