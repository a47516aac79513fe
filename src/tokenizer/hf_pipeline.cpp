#include "tokenizer/hf_pipeline.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_json_util.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

using nlohmann::json;

// Added-token spellings by byte; entry = index into HfPipeline::added_.
struct HfPipeline::Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t entry = -1;
  };
  std::vector<Node> nodes = std::vector<Node>(1);
  std::array<int32_t, 256> root{};  // root's children by byte, -1 when none (the hot lookup)

  Trie() { root.fill(-1); }
  bool empty() const { return nodes.size() == 1; }

  int32_t child(int32_t node, uint8_t byte) const {
    if (node == 0) return root[byte];
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, INT32_MIN));
    return it != children.end() && it->first == byte ? it->second : -1;
  }

  // The first insertion of a spelling keeps it (Hugging Face keeps the first added token too).
  void insert(std::string_view text, int32_t entry) {
    int32_t node = 0;
    for (char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes.size());
        if (node == 0) root[byte] = next;
        auto& children = nodes[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, INT32_MIN)),
                        {byte, next});
        nodes.emplace_back();  // may reallocate: `children` is not used after this
      }
      node = next;
    }
    if (nodes[node].entry < 0) nodes[node].entry = entry;
  }
};

namespace {

int32_t code_point_at(std::string_view text, size_t pos, size_t* length) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                                  static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  *length = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? cp : 0xFFFD;
}

// Start of the character that ends at text[end] (exclusive).
size_t previous_char_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

bool is_white_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Word characters for single_word: Rust's char::is_alphanumeric or '_'.
bool is_word_char(int32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges(const json& merges, const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!merges.is_array()) return invalid_argument(where + ": model.merges must be a list");
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = where + ": model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return invalid_argument(field + " '" + s + "' is not two symbols separated by one space");
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return invalid_argument(field + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return out;
}

// Token text -> id for a post-processor's special token.
Result<int32_t> id_of(const Vocab& vocab, const std::string& text, const std::string& where, const std::string& field) {
  const int32_t id = vocab.find(text);
  if (id < 0) return invalid_argument(where + ": " + field + " names '" + text + "', which is not in the vocabulary");
  return id;
}

}  // namespace

HfPipeline::HfPipeline() = default;
HfPipeline::~HfPipeline() = default;

Result<std::unique_ptr<HfPipeline>> HfPipeline::parse(std::string_view json_text, const std::string& where, Vocab* vocab) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (!root.is_object()) return invalid_argument(where + ": must hold a JSON object");
  std::unique_ptr<HfPipeline> p(new HfPipeline());

  // ---- model and vocabulary
  const json* model = hf_json::member(root, "model");
  if (model == nullptr) return invalid_argument(where + ": field 'model' is missing");
  if (!model->is_object()) return invalid_argument(where + ": field 'model' must be an object");
  std::string model_type = "BPE";  // old files omit the type of a BPE model
  if (hf_json::member(*model, "type") != nullptr) {
    DI_ASSIGN_OR_RETURN(model_type, hf_json::get_string(*model, "type", where, "model"));
  }
  if (model_type != "BPE") {
    return unimplemented(where + ": model.type '" + model_type + "' is not supported (only 'BPE')");
  }
  const json* model_vocab = hf_json::member(*model, "vocab");
  if (model_vocab == nullptr || !model_vocab->is_object()) {
    return invalid_argument(where + ": model.vocab is missing or not an object");
  }
  const json* added = hf_json::member(root, "added_tokens");
  if (added != nullptr && !added->is_array()) return invalid_argument(where + ": added_tokens must be a list");

  int64_t n_vocab = 0;
  for (auto it = model_vocab->begin(); it != model_vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= INT32_MAX) {
      return invalid_argument(where + ": model.vocab['" + it.key() + "'] is not a token id");
    }
    n_vocab = std::max(n_vocab, it->get<int64_t>() + 1);
  }
  p->model_vocab_size_ = static_cast<int32_t>(n_vocab);
  if (added != nullptr) {
    for (size_t i = 0; i < added->size(); ++i) {
      const json& t = (*added)[i];
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      HfAddedToken token;
      DI_ASSIGN_OR_RETURN(const int64_t id, hf_json::get_int_or(t, "id", -1, where, field));
      if (id < 0 || id >= INT32_MAX) return invalid_argument(where + ": " + field + ".id is missing or not a token id");
      token.id = static_cast<int32_t>(id);
      DI_ASSIGN_OR_RETURN(token.content, hf_json::get_string(t, "content", where, field));
      DI_ASSIGN_OR_RETURN(token.special, hf_json::get_bool_or(t, "special", false, where, field));
      DI_ASSIGN_OR_RETURN(token.lstrip, hf_json::get_bool_or(t, "lstrip", false, where, field));
      DI_ASSIGN_OR_RETURN(token.rstrip, hf_json::get_bool_or(t, "rstrip", false, where, field));
      DI_ASSIGN_OR_RETURN(token.normalized, hf_json::get_bool_or(t, "normalized", !token.special, where, field));
      DI_ASSIGN_OR_RETURN(token.single_word, hf_json::get_bool_or(t, "single_word", false, where, field));
      token.control = token.special || id >= p->model_vocab_size_;
      n_vocab = std::max(n_vocab, id + 1);
      p->added_.push_back(std::move(token));
    }
  }
  if (n_vocab == 0) return invalid_argument(where + ": model.vocab is empty");
  // Ids index a table: a stray huge id must be an error, not an allocation of gigabytes.
  constexpr int64_t kMaxVocab = int64_t{1} << 24;
  if (n_vocab > kMaxVocab) {
    return invalid_argument(where + ": a token id of " + std::to_string(n_vocab - 1) + " in model.vocab or added_tokens"
                            " is beyond the supported vocabulary size of " + std::to_string(kMaxVocab));
  }
  vocab->texts.assign(static_cast<size_t>(n_vocab), std::string());
  vocab->scores.assign(static_cast<size_t>(n_vocab), 0.0f);
  // Ids no entry names stay unused; they decode to nothing.
  vocab->types.assign(static_cast<size_t>(n_vocab), TokenType::kUnused);
  for (auto it = model_vocab->begin(); it != model_vocab->end(); ++it) {
    const auto id = static_cast<size_t>(it->get<int64_t>());
    vocab->texts[id] = it.key();
    vocab->types[id] = TokenType::kNormal;
  }
  for (const HfAddedToken& token : p->added_) {
    vocab->texts[token.id] = token.content;
    vocab->types[token.id] = token.control ? TokenType::kControl : TokenType::kUserDefined;
  }
  vocab->build_index();

  // ---- normalizer, pre-tokenizer, decoder
  static const json kNull;
  const json* normalizer = hf_json::member(root, "normalizer");
  DI_ASSIGN_OR_RETURN(p->normalizer_, HfNormalizer::parse(normalizer ? *normalizer : kNull, where, "normalizer"));
  const json* pre = hf_json::member(root, "pre_tokenizer");
  DI_ASSIGN_OR_RETURN(p->pre_tokenizer_, HfPreTokenizer::parse(pre ? *pre : kNull, where, "pre_tokenizer"));
  const json* decoder = hf_json::member(root, "decoder");
  DI_ASSIGN_OR_RETURN(p->decoder_, HfDecoder::parse(decoder ? *decoder : kNull, where, "decoder"));

  // ---- BPE
  HfBpeOptions options;
  options.byte_level = p->pre_tokenizer_.byte_level();
  DI_ASSIGN_OR_RETURN(options.byte_fallback, hf_json::get_bool_or(*model, "byte_fallback", false, where, "model"));
  DI_ASSIGN_OR_RETURN(options.ignore_merges, hf_json::get_bool_or(*model, "ignore_merges", false, where, "model"));
  DI_ASSIGN_OR_RETURN(options.fuse_unk, hf_json::get_bool_or(*model, "fuse_unk", false, where, "model"));
  if (hf_json::member(*model, "continuing_subword_prefix") != nullptr) {
    DI_ASSIGN_OR_RETURN(options.continuing_subword_prefix,
                        hf_json::get_string(*model, "continuing_subword_prefix", where, "model"));
  }
  if (hf_json::member(*model, "end_of_word_suffix") != nullptr) {
    DI_ASSIGN_OR_RETURN(options.end_of_word_suffix, hf_json::get_string(*model, "end_of_word_suffix", where, "model"));
  }
  if (hf_json::member(*model, "unk_token") != nullptr) {
    DI_ASSIGN_OR_RETURN(const std::string unk, hf_json::get_string(*model, "unk_token", where, "model"));
    options.unk_id = vocab->find(unk);
    if (options.unk_id < 0) return invalid_argument(where + ": model.unk_token '" + unk + "' is not in model.vocab");
    vocab->unknown_id = options.unk_id;
  }
  const json* merges = hf_json::member(*model, "merges");
  if (merges == nullptr) return invalid_argument(where + ": model.merges is missing");
  DI_ASSIGN_OR_RETURN(const auto merge_pairs, parse_merges(*merges, where));
  DI_ASSIGN_OR_RETURN(HfBpeModel bpe, HfBpeModel::create(*vocab, merge_pairs, options, where));
  p->model_ = std::make_unique<HfBpeModel>(std::move(bpe));

  // ---- added-token tries (normalized ones are spelled as the normalizer would write them)
  p->raw_trie_ = std::make_unique<Trie>();
  p->normalized_trie_ = std::make_unique<Trie>();
  for (size_t i = 0; i < p->added_.size(); ++i) {
    const HfAddedToken& token = p->added_[i];
    if (token.content.empty()) continue;
    if (token.normalized) {
      p->normalized_trie_->insert(p->normalizer_.apply(token.content), static_cast<int32_t>(i));
    } else {
      p->raw_trie_->insert(token.content, static_cast<int32_t>(i));
    }
  }

  p->cuttable_ = p->normalizer_.empty() && p->pre_tokenizer_.position_independent();
  for (const HfAddedToken& token : p->added_) {
    p->cuttable_ = p->cuttable_ && !token.lstrip && !token.rstrip && !token.single_word;
  }

  // ---- post-processor: the ids around a single sequence
  const json* post = hf_json::member(root, "post_processor");
  std::vector<const json*> processors;
  if (post != nullptr) {
    DI_ASSIGN_OR_RETURN(const std::string type, hf_json::get_type(*post, where, "post_processor"));
    if (type == "Sequence") {
      const json* list = hf_json::member(*post, "processors");
      if (list == nullptr || !list->is_array()) return invalid_argument(where + ": post_processor.processors must be a list");
      for (const json& item : *list) processors.push_back(&item);
    } else {
      processors.push_back(post);
    }
  }
  for (size_t i = 0; i < processors.size(); ++i) {
    const json& proc = *processors[i];
    const std::string field = post != nullptr && processors[i] != post ? "post_processor.processors[" + std::to_string(i) + "]"
                                                                       : "post_processor";
    DI_ASSIGN_OR_RETURN(const std::string type, hf_json::get_type(proc, where, field));
    if (type == "ByteLevel") continue;  // it only adjusts offsets
    if (type == "TemplateProcessing") {
      const json* single = hf_json::member(proc, "single");
      if (single == nullptr || !single->is_array()) return invalid_argument(where + ": " + field + ".single must be a list");
      const json* specials = hf_json::member(proc, "special_tokens");
      bool after_sequence = false;
      for (const json& item : *single) {
        if (const json* seq = hf_json::member(item, "Sequence"); seq != nullptr) {
          after_sequence = true;
          continue;
        }
        const json* special = hf_json::member(item, "SpecialToken");
        if (special == nullptr) return invalid_argument(where + ": " + field + ".single holds an item that is neither Sequence nor SpecialToken");
        DI_ASSIGN_OR_RETURN(const std::string name, hf_json::get_string(*special, "id", where, field + ".single[]"));
        const json* entry = specials != nullptr ? hf_json::member(*specials, name.c_str()) : nullptr;
        const json* ids = entry != nullptr ? hf_json::member(*entry, "ids") : nullptr;
        if (ids == nullptr || !ids->is_array()) {
          return invalid_argument(where + ": " + field + ".special_tokens['" + name + "'].ids is missing");
        }
        for (const json& id : *ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab) {
            return invalid_argument(where + ": " + field + ".special_tokens['" + name + "'].ids holds an id outside the vocabulary");
          }
          (after_sequence ? p->suffix_ids_ : p->prefix_ids_).push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      }
      p->has_post_template_ = true;
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      const json* cls = hf_json::member(proc, "cls");
      const json* sep = hf_json::member(proc, "sep");
      if (cls == nullptr || sep == nullptr || !cls->is_array() || !sep->is_array() || cls->empty() || sep->empty() ||
          !(*cls)[0].is_string() || !(*sep)[0].is_string()) {
        return invalid_argument(where + ": " + field + ".cls and .sep must be [token, id]");
      }
      DI_ASSIGN_OR_RETURN(const int32_t cls_id, id_of(*vocab, (*cls)[0].get<std::string>(), where, field + ".cls"));
      DI_ASSIGN_OR_RETURN(const int32_t sep_id, id_of(*vocab, (*sep)[0].get<std::string>(), where, field + ".sep"));
      p->prefix_ids_.push_back(cls_id);
      p->suffix_ids_.push_back(sep_id);
      p->has_post_template_ = true;
    } else {
      return unimplemented(where + ": " + field + ".type '" + type + "' is not a supported post-processor");
    }
  }
  return p;
}

void HfPipeline::find_added(const Trie& trie, std::string_view text, bool match_control,
                            std::vector<AddedMatch>* out) const {
  if (trie.empty()) return;
  size_t start_offset = 0;  // end of the previous match
  size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest: the longest allowed spelling that starts here.
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = trie.child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const int32_t entry = trie.nodes[node].entry;
      if (entry >= 0 && (match_control || !added_[entry].control)) {
        best = entry;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const HfAddedToken& token = added_[best];
    size_t begin = pos;
    size_t end = best_end;
    pos = best_end;
    if (begin < start_offset) continue;  // swallowed by the previous token's rstrip
    if (token.single_word) {
      size_t len = 0;
      const bool word_before = begin > 0 && is_word_char(code_point_at(text, previous_char_start(text, begin), &len));
      const bool word_after = end < text.size() && is_word_char(code_point_at(text, end, &len));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (begin > start_offset) {
        const size_t prev = previous_char_start(text, begin);
        size_t len = 0;
        if (!is_white_space(code_point_at(text, prev, &len))) break;
        begin = prev;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t len = 0;
        if (!is_white_space(code_point_at(text, end, &len))) break;
        end += len;
      }
      pos = end;
    }
    out->push_back({begin, end, token.id});
    start_offset = end;
  }
}

void HfPipeline::encode_text(std::string_view raw, bool match_control, bool at_start, std::vector<int32_t>* out) const {
  std::string sanitized;
  std::string_view text = raw;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t n = utf8::valid_length(raw, pos);
    if (n == 0) {
      sanitized = utf8::sanitize(raw);
      text = sanitized;
      break;
    }
    pos += n;
  }
  std::vector<AddedMatch> matches;
  find_added(*raw_trie_, text, match_control, &matches);
  size_t pos = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > pos) encode_normalized(text.substr(pos, m.begin - pos), match_control, at_start && pos == 0, out);
    out->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) encode_normalized(text.substr(pos), match_control, at_start && pos == 0, out);
}

void HfPipeline::encode_normalized(std::string_view text, bool match_control, bool at_start,
                                   std::vector<int32_t>* out) const {
  std::string normalized;
  if (!normalizer_.empty()) {
    bool dropped_start = false;
    normalized = normalizer_.apply(text, &dropped_start);
    text = normalized;
    at_start = at_start && !dropped_start;
  }
  std::vector<AddedMatch> matches;
  find_added(*normalized_trie_, text, match_control, &matches);
  size_t pos = 0;
  for (const AddedMatch& m : matches) {
    if (m.begin > pos) encode_model(text.substr(pos, m.begin - pos), at_start && pos == 0, out);
    out->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) encode_model(text.substr(pos), at_start && pos == 0, out);
}

void HfPipeline::split_views(std::string_view text, std::vector<std::string_view>* pieces) const {
  HfPreTokenizer::Arena arena;
  std::vector<PreToken> pre_tokens;
  pre_tokenizer_.split({text, false}, &arena, &pre_tokens);
  // Pieces are views into text: no step rewrites text when the pre-tokenizer is
  // position_independent(), which cuttable() requires.
  for (const PreToken& piece : pre_tokens) pieces->push_back(piece.text);
}

void HfPipeline::encode_model(std::string_view text, bool at_start, std::vector<int32_t>* out) const {
  HfPreTokenizer::Arena arena;
  std::vector<PreToken> pieces;
  pre_tokenizer_.split({text, at_start}, &arena, &pieces);
  for (const PreToken& piece : pieces) model_->encode_word(piece.text, out);
}

}  // namespace deepinfer
