// Per-sequence acceptance statistics by draft position: the estimate, for position j, of the
// probability that the target accepts the j-th draft token given that it accepted the ones
// before. Counts decay so that the estimate follows a sequence whose text changes character
// (quoting, then writing freely). The prior is the method's pooled rate over all sequences.
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
  static constexpr float kDecay = 0.9f;
  static constexpr float kPriorWeight = 2.0f;
  std::array<float, kMaxSpeculativeTokens> tried_{};
  std::array<float, kMaxSpeculativeTokens> accepted_{};
};

}  // namespace deepinfer::speculative
