#include "engine/speculative/back_off.h"

#include <algorithm>
#include <utility>

namespace deepinfer::speculative {

bool DraftBackOff::may_propose(const FailedDraftBudget& budget) {
  if (skip_ > 0) {
    --skip_;
    return false;
  }
  return misses_ == 0 || budget.allows_proposals();
}

void DraftBackOff::kept() {
  misses_ = 0;
  skip_ = 0;
  pending_seconds_ = 0.0;
}

double DraftBackOff::missed() {
  skip_ = 1 << std::min(misses_, kMaxDoublings);
  ++misses_;
  return std::exchange(pending_seconds_, 0.0);
}

}  // namespace deepinfer::speculative
