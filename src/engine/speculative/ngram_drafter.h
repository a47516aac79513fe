// Prompt lookup (vLLM's `ngram` method): find the latest earlier occurrence of the context's
// last n tokens, n from max_n down to min_n, and propose the tokens that followed it. Costs
// one backward scan of the context per step, and nothing when the text does not repeat.
#pragma once

#include <cstdint>
#include <span>

#include "engine/speculative/draft.h"

namespace deepinfer::speculative {

struct NgramOptions {
  int32_t min_n = 2;  // shorter matches propose too often to be worth a verification
  int32_t max_n = 5;
};

// Up to max_tokens tokens (confidence left at 0: the caller's acceptance statistics set it).
Draft propose_ngram(std::span<const int32_t> context, int32_t max_tokens, const NgramOptions& options = {});

}  // namespace deepinfer::speculative
