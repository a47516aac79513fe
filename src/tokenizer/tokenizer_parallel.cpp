// Tokenizer::encode_parallel: cutting long text where encoding the parts apart gives the same
// ids, and encoding the parts on a thread pool.
//
// Why many small parts rather than one per thread: encoding cost per byte varies with the text
// (a part of source code or of names costs more than one of licence prose, and a part whose
// words a thread's cache lacks costs more again), so equal byte halves finish apart; and on a
// shared machine a worker may start late. Threads take parts as they go (see there), so they
// finish within about one part of each other, and a thread that starts late takes fewer parts.
// The cut points are found on the pool too (each runs the pre-tokenizer on a window), so
// nothing but the final copy runs on one thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "core/thread_pool.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

namespace {

constexpr size_t kMinPartBytes = 16 * 1024;  // smaller parts cost more in overhead than they gain
constexpr size_t kPartsPerThread = 16;       // enough for threads to finish together
constexpr size_t kWindowBytes = 512;         // context either side of a cut for the check

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

void Tokenizer::split_views(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (kind_ == Kind::kHuggingFace) {
    hf_->split_views(text, pieces);
  } else {
    splitter_->split(text, pieces);
  }
}

// Whether the pre-tokenizer splits window[0, pos) and window[pos, end) apart into exactly the
// pieces it splits the whole window into. A piece boundary at pos is not enough: a lookahead
// such as GPT-2's \s+(?!\S) splits "\n\nThe" as "\n" "\n" "The" but a part ending in "\n\n"
// as one "\n\n" piece.
bool Tokenizer::cut_keeps_pieces(std::string_view window, size_t pos) const {
  std::vector<std::string_view> whole;
  std::vector<std::string_view> apart;
  split_views(window, &whole);
  split_views(window.substr(0, pos), &apart);
  split_views(window.substr(pos), &apart);
  if (whole.size() != apart.size()) return false;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i].data() != apart[i].data() || whole[i].size() != apart[i].size()) return false;
  }
  return true;
}

// The first cut point p in [from, limit): text[p - 1] is '\n', text[p] an ASCII letter, and
// cutting there keeps the pre-tokenizer's pieces (checked on a window around p).
// std::string_view::npos when there is none.
size_t Tokenizer::first_cut(std::string_view text, size_t from, size_t limit) const {
  limit = std::min(limit, text.size());
  for (size_t p = std::max<size_t>(from, 1); p < limit; ++p) {
    const void* newline = std::memchr(text.data() + p - 1, '\n', limit - p);
    if (newline == nullptr) break;
    p = static_cast<size_t>(static_cast<const char*>(newline) - text.data()) + 1;
    if (!is_ascii_letter(text[p])) continue;
    const size_t begin = p > kWindowBytes ? p - kWindowBytes : 0;
    const size_t end = std::min(text.size(), p + kWindowBytes);
    if (cut_keeps_pieces(text.substr(begin, end - begin), p - begin)) return p;
  }
  return std::string_view::npos;
}

std::vector<int32_t> Tokenizer::encode_parallel(std::string_view text, const EncodeOptions& options,
                                                ThreadPool& pool) const {
  if (!parallel_safe_ || pool.n_threads() < 2 || text.size() < 2 * kMinPartBytes) return encode(text, options);
  // The text is cut into stretches of `stride` bytes; part k runs from the first cut point in
  // stretch k (part 0 from the start) to the next part's start. A stretch without a cut point
  // gives an empty part, its text going to the part before it.
  const size_t n_parts = std::clamp<size_t>(text.size() / kMinPartBytes, 2,
                                            static_cast<size_t>(pool.n_threads()) * kPartsPerThread);
  const size_t stride = text.size() / n_parts;
  std::vector<size_t> starts(n_parts + 1);  // [n_parts + 1] part k is [starts[k], next start)
  starts[0] = 0;
  starts[n_parts] = text.size();
  pool.parallel_for(static_cast<int64_t>(n_parts) - 1, [&](int, int64_t first, int64_t last) {
    for (auto k = static_cast<size_t>(first) + 1; k <= static_cast<size_t>(last); ++k) {
      starts[k] = first_cut(text, k * stride, k + 1 == n_parts ? text.size() : (k + 1) * stride);
    }
  });
  // Thread t starts at part t * n_parts / n_threads and walks on (wrapping around), taking each
  // part no thread has taken yet: each thread mostly encodes one stretch of the text, which
  // keeps its word cache small, and the threads meet where the slower one has got to.
  std::vector<std::vector<int32_t>> parts(n_parts);
  const auto taken = std::make_unique<std::atomic<bool>[]>(n_parts);
  const int64_t n_threads = pool.n_threads();
  pool.parallel_for(n_threads, [&](int, int64_t slot, int64_t) {
    const size_t first = n_parts * static_cast<size_t>(slot) / static_cast<size_t>(n_threads);
    for (size_t i = 0; i < n_parts; ++i) {
      const size_t k = (first + i) % n_parts;
      if (starts[k] == std::string_view::npos || taken[k].exchange(true, std::memory_order_relaxed)) continue;
      size_t end_part = k + 1;
      while (starts[end_part] == std::string_view::npos) ++end_part;
      const std::string_view part = text.substr(starts[k], starts[end_part] - starts[k]);
      std::vector<int32_t>& ids = parts[k];
      // About a token per 4 bytes of prose: at most one regrowth. Parts this small reuse freed
      // heap memory; a vector growing to megabytes is mapped afresh and page-faulted on every
      // call, and two threads faulting at once contend in the kernel.
      ids.reserve(part.size() / 3);
      encode_text(part, options.parse_special, /*first=*/k == 0, /*after_special=*/k == 0, &ids);
    }
  });
  size_t total = 0;
  for (const auto& part : parts) total += part.size();
  std::vector<int32_t> out;
  out.reserve(total + 4);
  add_prefix(&out, options.add_bos);
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  add_suffix(&out, options.add_bos);
  return out;
}

}  // namespace deepinfer
