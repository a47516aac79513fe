#include "engine/speculative/acceptance.h"

#include <algorithm>

namespace deepinfer::speculative {

void AcceptanceStats::record(int32_t n_drafted, int32_t n_accepted) {
  for (size_t b = 0; b < tried_.size(); ++b) {
    tried_[b] *= kDecay;
    accepted_[b] *= kDecay;
  }
  // Position j was tried when every position before it was accepted.
  const int32_t n_tried = std::min(n_drafted, n_accepted + 1);
  for (int32_t j = 0; j < n_tried; ++j) {
    const auto b = static_cast<size_t>(std::min(j, kBuckets - 1));
    tried_[b] += 1.0f;
    accepted_[b] += j < n_accepted ? 1.0f : 0.0f;
  }
}

float AcceptanceStats::rate(int32_t j, float prior) const {
  const auto b = static_cast<size_t>(std::clamp(j, 0, kBuckets - 1));
  return (accepted_[b] + kPriorWeight * prior) / (tried_[b] + kPriorWeight);
}

}  // namespace deepinfer::speculative
