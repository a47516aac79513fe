// How many draft tokens each sequence verifies this step (DSpark's prefix scheduler).
//
// A step of B tokens takes about t(B) = t0 + t1 * B seconds (StepCostModel, fitted online from
// the engine's own steps: the "profiled steps-per-second curve"). Each decoding sequence yields
// one token per step and, when it verifies a draft prefix of length l, expects
// sum_{j<=l} a_j more, a_j being the survival probability of draft position j (the product of
// the conditional acceptances up to j). choose_draft_lengths maximises expected tokens per
// second, tau / t(B), by admitting (sequence, position) pairs in order of survival and stopping
// at the first that does not raise it: survivals fall along a draft, so what is admitted is a
// prefix of each draft. With many sequences decoding, tau is large and t1 weighs more: a busy
// engine verifies only its likeliest drafts; an idle one verifies far.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/speculative/draft.h"

namespace deepinfer::speculative {

class StepCostModel {
 public:
  // `prior_per_token`: t1 / t0 until the steps seen span enough sizes to fit it.
  explicit StepCostModel(double prior_per_token = 0.1) : prior_ratio_(prior_per_token) {}
  void observe(int64_t tokens, double seconds);
  double seconds(int64_t tokens) const;
  double base_seconds() const;       // t0
  double per_token_seconds() const;  // t1
  bool empty() const { return weight_ < 1e-9; }

 private:
  static constexpr double kDecay = 0.99;  // about the last hundred steps
  double prior_ratio_;
  double weight_ = 0, sum_b_ = 0, sum_bb_ = 0, sum_t_ = 0, sum_bt_ = 0;
};

// One speculating sequence's proposal: its draft's survival probabilities, best first.
struct DraftCandidate {
  std::span<const float> survival;  // [draft length], non-increasing
};

// The number of draft tokens to verify for each candidate. `base_tokens`: the step's tokens
// without drafts; `base_yield`: tokens the step yields without drafts (its decoding
// sequences); `max_draft_tokens`: the step's room for drafts.
std::vector<int32_t> choose_draft_lengths(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                                          double base_yield, int64_t max_draft_tokens, const StepCostModel& cost);

}  // namespace deepinfer::speculative
