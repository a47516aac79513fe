// Per-sequence acceptance statistics by draft position: the estimate, for position j, of the
// probability that the target accepts the j-th draft token given that it accepted the ones
// before. Counts decay so that the estimate follows a sequence whose text changes character
// (quoting, then writing freely). The prior is the method's pooled rate over all sequences.
//
// Positions from 2 on share one estimate: a draft that got two tokens right is copying, and
// deeper positions are tried too seldom to have estimates of their own. Every verification
// decays every position's evidence, tried or not, and so does a draft the schedule verified
// none of (record(0, 0)): a position the schedule stopped trying drifts back to the prior and
// is tried again: without that, one early bad run would keep it untried for good.
#pragma once

#include <array>
#include <cstdint>

#include "deepinfer/engine.h"

namespace deepinfer::speculative {

class AcceptanceStats {
 public:
  // After a verification of n_drafted tokens of which the first n_accepted were kept.
  void record(int32_t n_drafted, int32_t n_accepted);
  // Conditional acceptance at position j (0-based), shrunk towards `prior` with the weight of
  // kPriorWeight observations.
  float rate(int32_t j, float prior) const;

 private:
  static constexpr int32_t kBuckets = 3;  // positions 0, 1, and 2 on
  static constexpr float kDecay = 0.9f;
  static constexpr float kPriorWeight = 2.0f;
  std::array<float, kBuckets> tried_{};
  std::array<float, kBuckets> accepted_{};
};

}  // namespace deepinfer::speculative
