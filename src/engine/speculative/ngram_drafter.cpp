#include "engine/speculative/ngram_drafter.h"

#include <algorithm>

namespace deepinfer::speculative {

Draft propose_ngram(std::span<const int32_t> context, int32_t max_tokens, const NgramOptions& options) {
  Draft d;
  const auto len = static_cast<int64_t>(context.size());
  max_tokens = std::min(max_tokens, kMaxSpeculativeTokens);
  for (int64_t n = std::min<int64_t>(options.max_n, len - 1); n >= options.min_n && max_tokens > 0; --n) {
    const std::span<const int32_t> tail = context.subspan(static_cast<size_t>(len - n));
    // Latest first: the most recent repetition is the likeliest to continue (an edit of the
    // text just quoted). The occurrence must end before the tail itself starts to be "earlier",
    // and must be followed by at least one token.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (context[static_cast<size_t>(start)] != tail[0] ||
          !std::equal(tail.begin(), tail.end(), context.begin() + start)) {
        continue;
      }
      const int64_t follow = start + n;
      const int64_t available = std::min<int64_t>(max_tokens, len - follow);
      for (int64_t i = 0; i < available; ++i) d.push(context[static_cast<size_t>(follow + i)], 0.0f);
      return d;
    }
  }
  return d;
}

}  // namespace deepinfer::speculative
