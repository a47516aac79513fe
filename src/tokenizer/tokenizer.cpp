#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_json_util.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's space

constexpr uint32_t kSpecialTypes =
    type_bit(TokenType::kControl) | type_bit(TokenType::kUserDefined) | type_bit(TokenType::kUnknown);

// Control tokens that close a turn in the chat formats we know. A GGUF file names only one EOS
// (often the document end), so a chat model would otherwise run past the end of its answer.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
    "<|end_of_text|>", "<EOT>", "<|return|>", "<|call|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
};

// "<0x0A>" -> 10; -1 when text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

// An optional token id key: -1 when absent, an error when present but not an id of the vocabulary.
Result<int32_t> read_token_id(const Metadata& metadata, std::string_view key, int32_t n_vocab) {
  if (!metadata.has(key)) return -1;
  DI_ASSIGN_OR_RETURN(int64_t id, metadata.get_int(key));
  if (id < 0 || id >= n_vocab) {
    return invalid_argument("metadata key '" + std::string(key) + "' is " + std::to_string(id) +
                            ", outside the vocabulary of " + std::to_string(n_vocab) + " tokens");
  }
  return static_cast<int32_t>(id);
}

Status length_mismatch(std::string_view key, size_t got, size_t want) {
  return invalid_argument("metadata key '" + std::string(key) + "' has " + std::to_string(got) +
                          " entries but tokenizer.ggml.tokens has " + std::to_string(want));
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_metadata(const Metadata& metadata) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  DI_ASSIGN_OR_RETURN(const std::string model, metadata.get_string("tokenizer.ggml.model"));
  if (model == "gpt2") {
    tok->kind_ = Kind::kByteLevelBpe;
  } else if (model == "llama") {
    tok->kind_ = Kind::kSentencePiece;
  } else {
    return unimplemented("metadata key 'tokenizer.ggml.model' is '" + model +
                         "'; supported tokenizers are 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)");
  }
  const bool spm = tok->kind_ == Kind::kSentencePiece;

  auto vocab = std::make_unique<Vocab>();
  DI_ASSIGN_OR_RETURN(vocab->texts, metadata.get_string_array("tokenizer.ggml.tokens"));
  const size_t n = vocab->texts.size();
  if (n == 0) return invalid_argument("metadata key 'tokenizer.ggml.tokens' is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return invalid_argument("metadata key 'tokenizer.ggml.tokens' is too long");
  const auto n_vocab = static_cast<int32_t>(n);

  if (metadata.has("tokenizer.ggml.scores")) {
    DI_ASSIGN_OR_RETURN(const std::vector<double> scores, metadata.get_float_array("tokenizer.ggml.scores"));
    if (scores.size() != n) return length_mismatch("tokenizer.ggml.scores", scores.size(), n);
    vocab->scores.assign(scores.begin(), scores.end());
  } else if (spm) {
    return not_found("metadata key 'tokenizer.ggml.scores' is missing (tokenizer 'llama' merges by score)");
  } else {
    vocab->scores.assign(n, 0.0f);
  }

  vocab->types.assign(n, TokenType::kNormal);
  if (metadata.has("tokenizer.ggml.token_type")) {
    DI_ASSIGN_OR_RETURN(const std::vector<int64_t> types, metadata.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n) return length_mismatch("tokenizer.ggml.token_type", types.size(), n);
    for (size_t i = 0; i < n; ++i) {
      // 0 is "undefined" in GGUF writers; it behaves as a normal token.
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte)) {
        return invalid_argument("metadata key 'tokenizer.ggml.token_type' has type " + std::to_string(types[i]) +
                                " at index " + std::to_string(i) + " (expected 1..6)");
      }
      if (types[i] != 0) vocab->types[i] = static_cast<TokenType>(types[i]);
    }
  }
  vocab->build_index();

  DI_ASSIGN_OR_RETURN(tok->bos_id_, read_token_id(metadata, "tokenizer.ggml.bos_token_id", n_vocab));
  DI_ASSIGN_OR_RETURN(tok->eos_id_, read_token_id(metadata, "tokenizer.ggml.eos_token_id", n_vocab));
  DI_ASSIGN_OR_RETURN(tok->unknown_id_, read_token_id(metadata, "tokenizer.ggml.unknown_token_id", n_vocab));
  DI_ASSIGN_OR_RETURN(tok->padding_id_, read_token_id(metadata, "tokenizer.ggml.padding_token_id", n_vocab));
  DI_ASSIGN_OR_RETURN(const int32_t eot_id, read_token_id(metadata, "tokenizer.ggml.eot_token_id", n_vocab));
  DI_ASSIGN_OR_RETURN(const int32_t eom_id, read_token_id(metadata, "tokenizer.ggml.eom_token_id", n_vocab));
  // SentencePiece's <unk> is the fallback of last resort when a vocabulary lacks byte tokens.
  if (tok->unknown_id_ < 0 && spm) tok->unknown_id_ = vocab->find("<unk>");
  // A byte-level vocabulary drops bytes it has no token for, as llama.cpp does: its unknown id
  // is often a control token (SmolLM2: <|endoftext|>), and typed text must never produce one.
  vocab->unknown_id = spm ? tok->unknown_id_ : -1;

  // Defaults as the formats have them: SentencePiece models start with BOS and a space.
  DI_ASSIGN_OR_RETURN(tok->add_bos_, metadata.get_bool_or("tokenizer.ggml.add_bos_token", spm));
  DI_ASSIGN_OR_RETURN(tok->add_space_prefix_, metadata.get_bool_or("tokenizer.ggml.add_space_prefix", spm));
  DI_ASSIGN_OR_RETURN(tok->chat_template_, metadata.get_string_or("tokenizer.chat_template", ""));

  if (spm) {
    tok->spm_ = std::make_unique<SpmModel>(*vocab);
  } else {
    DI_ASSIGN_OR_RETURN(const std::vector<std::string> merges, metadata.get_string_array("tokenizer.ggml.merges"));
    DI_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::create(*vocab, merges));
    tok->bpe_ = std::make_unique<BpeModel>(std::move(bpe));
    DI_ASSIGN_OR_RETURN(const std::string pre, metadata.get_string_or("tokenizer.ggml.pre", "gpt2"));
    auto patterns = pre_tokenizer_patterns(pre);
    if (!patterns.ok()) {
      // Ids may then differ from the model's own tokenizer, but text still round-trips.
      DI_LOG(kWarn, "tokenizer.ggml.pre '" + pre + "' is not known; using GPT-2's pre-tokenizer");
      patterns = pre_tokenizer_patterns("gpt2");
    }
    DI_ASSIGN_OR_RETURN(RegexSplitter splitter, RegexSplitter::create(*patterns));
    tok->splitter_ = std::make_unique<RegexSplitter>(std::move(splitter));
  }

  tok->pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = vocab->texts[id];
    switch (vocab->types[id]) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUnused:
        break;  // render as nothing
      case TokenType::kUserDefined:
        tok->pieces_[id] = text;
        break;
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        tok->pieces_[id] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
        break;
      }
      case TokenType::kNormal:
        tok->pieces_[id] = spm ? utf8::replace_all(text, kSpaceMark, " ") : byte_level::decode(text);
        break;
    }
  }

  for (int32_t id : {tok->eos_id_, eot_id, eom_id}) {
    if (id >= 0) tok->end_of_generation_.insert(id);
  }
  tok->add_end_of_turn_tokens(*vocab);

  tok->specials_ = std::make_unique<SpecialTokenMatcher>(*vocab, kSpecialTypes);
  tok->vocab_ = std::move(vocab);
  tok->init_parallel_safety();
  return tok;
}

void Tokenizer::add_end_of_turn_tokens(const Vocab& vocab) {
  for (std::string_view text : kEndOfTurnTexts) {
    const int32_t id = vocab.find(text);
    if (id >= 0 && (vocab.types[id] == TokenType::kControl || vocab.types[id] == TokenType::kUserDefined)) {
      end_of_generation_.insert(id);
    }
  }
}

int64_t Tokenizer::n_vocab() const { return vocab_->size(); }

void Tokenizer::add_prefix(std::vector<int32_t>* out, bool add_bos) const {
  if (!add_bos) return;
  if (hf_ && hf_->has_post_template()) {
    out->insert(out->end(), hf_->prefix_ids().begin(), hf_->prefix_ids().end());
  } else if (bos_id_ >= 0 && (!hf_ || add_bos_)) {
    out->push_back(bos_id_);
  }
}

void Tokenizer::add_suffix(std::vector<int32_t>* out, bool add_bos) const {
  if (add_bos && hf_ && hf_->has_post_template()) out->insert(out->end(), hf_->suffix_ids().begin(), hf_->suffix_ids().end());
}

void Tokenizer::encode_text(std::string_view text, bool parse_special, bool first, bool after_special,
                            std::vector<int32_t>* out) const {
  if (kind_ == Kind::kHuggingFace) {
    hf_->encode_text(text, parse_special, first, out);
    return;
  }
  std::vector<Fragment> fragments;
  const uint32_t types = parse_special ? kSpecialTypes : type_bit(TokenType::kUserDefined);
  specials_->partition(text, types, &fragments);
  // SentencePiece's dummy prefix goes at the start of the text and after each special token.
  for (const Fragment& fragment : fragments) {
    if (fragment.token_id >= 0) {
      out->push_back(fragment.token_id);
      after_special = true;
      continue;
    }
    encode_plain(fragment.text, add_space_prefix_ && after_special, out);
    after_special = false;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> out;
  add_prefix(&out, options.add_bos);
  encode_text(text, options.parse_special, /*first=*/true, /*after_special=*/true, &out);
  add_suffix(&out, options.add_bos);
  return out;
}

Result<std::vector<int32_t>> Tokenizer::encode_segments(std::span<const Segment> segments,
                                                        const SegmentOptions& options) const {
  std::vector<int32_t> out;
  add_prefix(&out, options.add_bos);
  bool after_special = true;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    if (segment.token_id >= 0) {
      if (segment.token_id >= vocab_->size()) {
        return invalid_argument("segment " + std::to_string(i) + ": token id " + std::to_string(segment.token_id) +
                                " is outside the vocabulary of " + std::to_string(vocab_->size()) + " tokens");
      }
      out.push_back(segment.token_id);
      after_special = true;
      continue;
    }
    if (segment.text.empty()) continue;
    encode_text(segment.text, /*parse_special=*/false, /*first=*/i == 0, after_special, &out);
    after_special = false;
  }
  add_suffix(&out, options.add_bos);
  return out;
}

// space_prefix applies to SentencePiece only: a byte-level vocabulary spells its spaces itself
// (llama.cpp also ignores add_space_prefix there).
void Tokenizer::encode_plain(std::string_view text, bool space_prefix, std::vector<int32_t>* out) const {
  if (kind_ == Kind::kSentencePiece) {
    std::string escaped = space_prefix ? std::string(kSpaceMark) : std::string();
    escaped += utf8::replace_all(text, " ", kSpaceMark);
    spm_->encode(escaped, out);
    return;
  }
  std::vector<std::string_view> words;
  splitter_->split(text, &words);
  for (std::string_view word : words) bpe_->encode_word(word, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_->size()) bytes += pieces_[id];
  }
  size_t skip = 0;
  while (skip < bytes.size() && static_cast<int>(skip) < leading_strip_count_ && bytes[skip] == leading_strip_char_) ++skip;
  return utf8::sanitize(std::string_view(bytes).substr(skip));
}

std::string Tokenizer::token_piece(int32_t id) const {
  return id >= 0 && id < vocab_->size() ? pieces_[id] : std::string();
}

std::string Tokenizer::token_text(int32_t id) const {
  return id >= 0 && id < vocab_->size() ? vocab_->texts[id] : std::string();
}

bool Tokenizer::is_end_of_generation(int32_t id) const { return end_of_generation_.count(id) != 0; }

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_->size() && vocab_->types[id] == TokenType::kControl;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}

std::string IncrementalDecoder::push(int32_t id) {
  std::string piece = tokenizer_->token_piece(id);
  if (!started_ && !piece.empty()) {
    size_t skip = 0;
    while (skip < piece.size() && stripped_ < tokenizer_->leading_strip_count_ &&
           piece[skip] == tokenizer_->leading_strip_char_) {
      ++skip;
      ++stripped_;
    }
    piece.erase(0, skip);
    started_ = !piece.empty() || stripped_ >= tokenizer_->leading_strip_count_;
  }
  pending_ += piece;
  std::string out;
  const size_t used = utf8::append_sanitized(pending_, /*hold_incomplete=*/true, &out);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDecoder::finish() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace deepinfer
