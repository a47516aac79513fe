// A Hugging Face tokenizer.json as one object: added tokens, normalizer, pre-tokenizer, BPE
// model, post-processor and decoder. Tokenizer::from_tokenizer_json builds one and forwards
// encoding to it; the vocabulary (texts and types) lives in the Tokenizer's Vocab.
//
// Encoding text follows Hugging Face's order: added tokens with normalized=false are found in
// the raw text; the text between them is normalized; added tokens with normalized=true are
// found in that; what is left is pre-tokenized and given to the model. Matching is leftmost-
// longest, with the lstrip/rstrip/single_word rules of each added token.
//
// Immutable after parse(); encode_text may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

struct HfAddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
  // Matched only in trusted text (EncodeOptions::parse_special): every special token, and every
  // added token the model's own vocabulary lacks (markers such as DeepSeek's "<｜User｜>",
  // which the file marks special=false). Added tokens that are ordinary model pieces (a
  // SentencePiece user-defined "\n\n") are matched in any text, as with GGUF user-defined tokens.
  bool control = false;
};

class HfPipeline {
 public:
  // Parses tokenizer.json text; fills *vocab (texts, types; Vocab::build_index is called).
  // Errors name `where` and the JSON field.
  static Result<std::unique_ptr<HfPipeline>> parse(std::string_view json_text, const std::string& where, Vocab* vocab);

  ~HfPipeline();

  // Appends the ids of text. Invalid UTF-8 is first replaced by U+FFFD (maximal subparts).
  // at_start: the text begins the input (Metaspace's prepend_scheme "first").
  void encode_text(std::string_view text, bool match_control, bool at_start, std::vector<int32_t>* out) const;

  // Ids the post-processor puts around a single sequence (TemplateProcessing, Bert/Roberta).
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }
  bool has_post_template() const { return has_post_template_; }

  // Whether text may be cut between two pre-tokens and the parts encoded apart (parallel
  // encoding): no normalizer (it could join or move text), a position-independent
  // pre-tokenizer, and no added token that reaches across whitespace (lstrip/rstrip).
  bool cuttable() const { return cuttable_; }
  // The pre-tokens of text, as views into it (only when cuttable(): nothing is rewritten).
  void split_views(std::string_view text, std::vector<std::string_view>* pieces) const;

  const HfDecoder& decoder() const { return decoder_; }
  const std::vector<HfAddedToken>& added_tokens() const { return added_; }
  int32_t model_vocab_size() const { return model_vocab_size_; }  // ids below this are model pieces

 private:
  struct Trie;
  struct AddedMatch {
    size_t begin;
    size_t end;
    int32_t id;
  };
  HfPipeline();
  void find_added(const Trie& trie, std::string_view text, bool match_control, std::vector<AddedMatch>* out) const;
  void encode_normalized(std::string_view text, bool match_control, bool at_start, std::vector<int32_t>* out) const;
  void encode_model(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  std::vector<HfAddedToken> added_;
  std::unique_ptr<Trie> raw_trie_;         // added tokens with normalized=false
  std::unique_ptr<Trie> normalized_trie_;  // added tokens with normalized=true, spelled normalized
  HfNormalizer normalizer_;
  HfPreTokenizer pre_tokenizer_;
  std::unique_ptr<HfBpeModel> model_;
  HfDecoder decoder_;
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  bool has_post_template_ = false;
  bool cuttable_ = false;
  int32_t model_vocab_size_ = 0;
};

}  // namespace deepinfer
