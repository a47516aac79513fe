// Tokenizer::encode_parallel: cutting long text where encoding the parts apart gives the same
// ids, and encoding the parts on a thread pool.
#include <algorithm>

#include "core/thread_pool.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

namespace {

constexpr size_t kMinPartBytes = 16 * 1024;   // smaller parts cost more in overhead than they gain
constexpr size_t kWindowBytes = 512;           // context either side of a cut for the check
constexpr size_t kMaxSearchBytes = 256 * 1024; // how far past its target a cut may move

bool is_ascii_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// A token text containing "\n" + letter could be matched across a cut.
bool spans_cut_point(const std::string& text) {
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '\n' && is_ascii_letter(text[i + 1])) return true;
  }
  return false;
}

}  // namespace

void Tokenizer::init_parallel_safety() {
  switch (kind_) {
    case Kind::kSentencePiece:
      parallel_safe_ = false;
      return;
    case Kind::kByteLevelBpe:
      parallel_safe_ = true;
      break;
    case Kind::kHuggingFace:
      parallel_safe_ = hf_->cuttable();
      break;
  }
  for (int32_t id = 0; id < vocab_->size() && parallel_safe_; ++id) {
    if (vocab_->types[id] != TokenType::kNormal && spans_cut_point(vocab_->texts[id])) parallel_safe_ = false;
  }
}

bool Tokenizer::is_piece_boundary(std::string_view window, size_t pos) const {
  if (kind_ == Kind::kHuggingFace) return hf_->is_piece_boundary(window, pos);
  std::vector<std::string_view> pieces;
  splitter_->split(window, &pieces);
  for (std::string_view piece : pieces) {
    if (piece.data() == window.data() + pos) return true;
  }
  return false;
}

// Cut positions (increasing, each in (0, text.size())) for about n_parts parts.
std::vector<size_t> Tokenizer::find_cuts(std::string_view text, int n_parts) const {
  std::vector<size_t> cuts;
  const size_t part = text.size() / static_cast<size_t>(n_parts);
  size_t last = 0;
  for (int k = 1; k < n_parts; ++k) {
    const size_t target = std::max(last + kMinPartBytes, part * static_cast<size_t>(k));
    const size_t limit = std::min(text.size() - 1, target + kMaxSearchBytes);
    for (size_t p = target; p < limit; ++p) {
      if (text[p - 1] != '\n' || !is_ascii_letter(text[p])) continue;
      const size_t begin = p > kWindowBytes ? p - kWindowBytes : 0;
      const size_t end = std::min(text.size(), p + kWindowBytes);
      if (!is_piece_boundary(text.substr(begin, end - begin), p - begin)) continue;
      cuts.push_back(p);
      last = p;
      break;
    }
    if (text.size() - last < 2 * kMinPartBytes) break;
  }
  return cuts;
}

std::vector<int32_t> Tokenizer::encode_parallel(std::string_view text, const EncodeOptions& options,
                                                ThreadPool& pool) const {
  if (!parallel_safe_ || pool.n_threads() < 2 || text.size() < 2 * kMinPartBytes) return encode(text, options);
  const std::vector<size_t> cuts = find_cuts(text, pool.n_threads());
  if (cuts.empty()) return encode(text, options);
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (size_t cut : cuts) {
    parts.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  parts.push_back(text.substr(begin));
  std::vector<std::vector<int32_t>> ids(parts.size());
  pool.parallel_for(static_cast<int64_t>(parts.size()), [&](int, int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      encode_text(parts[i], options.parse_special, /*first=*/i == 0, /*after_special=*/i == 0, &ids[i]);
    }
  });
  std::vector<int32_t> out;
  size_t total = 0;
  for (const auto& part : ids) total += part.size();
  out.reserve(total + 4);
  add_prefix(&out, options.add_bos);
  for (const auto& part : ids) out.insert(out.end(), part.begin(), part.end());
  add_suffix(&out, options.add_bos);
  return out;
}

}  // namespace deepinfer
