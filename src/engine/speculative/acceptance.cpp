#include "engine/speculative/acceptance.h"

#include <algorithm>

namespace deepinfer::speculative {

void AcceptanceStats::record(int32_t n_drafted, int32_t n_accepted) {
  // Position j was tried when every position before it was accepted.
  const int32_t n_tried = std::min(n_drafted, n_accepted + 1);
  for (int32_t j = 0; j < n_tried; ++j) {
    auto& t = tried_[static_cast<size_t>(j)];
    auto& a = accepted_[static_cast<size_t>(j)];
    t = t * kDecay + 1.0f;
    a = a * kDecay + (j < n_accepted ? 1.0f : 0.0f);
  }
}

float AcceptanceStats::rate(int32_t j, float prior) const {
  const auto i = static_cast<size_t>(std::clamp(j, 0, kMaxSpeculativeTokens - 1));
  return (accepted_[i] + kPriorWeight * prior) / (tried_[i] + kPriorWeight);
}

}  // namespace deepinfer::speculative
