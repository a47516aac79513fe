// What a drafter proposes for one sequence: the tokens it expects next, with an estimate for
// each of the probability that the target model accepts it given that it accepted those before
// (a conditional acceptance, as DSpark's confidence head estimates it).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>

#include "deepinfer/engine.h"

namespace deepinfer::speculative {

struct Draft {
  std::array<int32_t, kMaxSpeculativeTokens> tokens{};
  std::array<float, kMaxSpeculativeTokens> confidence{};
  int32_t n = 0;

  std::span<const int32_t> view() const { return {tokens.data(), static_cast<size_t>(n)}; }
  void push(int32_t token, float c) {
    tokens[static_cast<size_t>(n)] = token;
    confidence[static_cast<size_t>(n)] = c;
    ++n;
  }
};

// One sequence's request for a proposal from a drafter that drafts all sequences together (a
// draft model, the MTP layer): up to max_tokens draft tokens after `context` into *out.
struct DraftJob {
  uint64_t id = 0;  // the sequence (kv::RequestId)
  std::span<const int32_t> context;
  int32_t max_tokens = 0;
  Draft* out = nullptr;
};

// A greedy drafter's token at one logits row and its probability (the row's softmax at it).
inline std::pair<int32_t, float> best_token(std::span<const float> logits) {
  const auto it = std::max_element(logits.begin(), logits.end());
  const float best = *it;
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - best));
  return {static_cast<int32_t>(it - logits.begin()), static_cast<float>(1.0 / sum)};
}

}  // namespace deepinfer::speculative
