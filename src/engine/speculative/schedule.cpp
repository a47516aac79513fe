#include "engine/speculative/schedule.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::speculative {

void StepCostModel::observe(int64_t tokens, double seconds) {
  if (!(seconds > 0.0) || tokens < 1) return;
  const auto b = static_cast<double>(tokens);
  weight_ = weight_ * kDecay + 1.0;
  sum_b_ = sum_b_ * kDecay + b;
  sum_bb_ = sum_bb_ * kDecay + b * b;
  sum_t_ = sum_t_ * kDecay + seconds;
  sum_bt_ = sum_bt_ * kDecay + b * seconds;
}

double StepCostModel::per_token_seconds() const {
  if (empty()) return 0.0;
  const double mean_b = sum_b_ / weight_;
  const double mean_t = sum_t_ / weight_;
  const double var_b = sum_bb_ / weight_ - mean_b * mean_b;
  const double prior = prior_ratio_ * mean_t / (1.0 + prior_ratio_ * mean_b);  // t1 if t1 = ratio * t0
  // Sizes that barely varied say nothing about the slope: lean on the prior, and always keep
  // a little of it so one noisy step cannot make tokens look free (or negative).
  const double strength = var_b / (var_b + 4.0);
  const double fitted = var_b > 0.0 ? (sum_bt_ / weight_ - mean_b * mean_t) / var_b : prior;
  return std::max(0.05 * prior, strength * fitted + (1.0 - strength) * prior);
}

double StepCostModel::base_seconds() const {
  if (empty()) return 1.0;
  return std::max(1e-6, sum_t_ / weight_ - per_token_seconds() * sum_b_ / weight_);
}

double StepCostModel::seconds(int64_t tokens) const {
  return base_seconds() + per_token_seconds() * static_cast<double>(tokens);
}

std::vector<int32_t> choose_draft_lengths(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                                          double base_yield, int64_t max_draft_tokens, const StepCostModel& cost) {
  std::vector<int32_t> lengths(candidates.size(), 0);
  struct Pair {
    float survival;
    size_t candidate;
    int32_t position;
  };
  std::vector<Pair> pairs;
  for (size_t c = 0; c < candidates.size(); ++c) {
    for (size_t j = 0; j < candidates[c].survival.size(); ++j) {
      pairs.push_back({candidates[c].survival[j], c, static_cast<int32_t>(j)});
    }
  }
  // Best survival first; within a draft, earlier positions first (ties keep prefixes whole).
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    if (a.survival != b.survival) return a.survival > b.survival;
    if (a.candidate != b.candidate) return a.candidate < b.candidate;
    return a.position < b.position;
  });
  int64_t tokens = base_tokens;
  double yield = base_yield;
  double rate = yield / cost.seconds(tokens);
  int64_t room = max_draft_tokens;
  for (const Pair& p : pairs) {
    if (room == 0) break;
    if (p.position != lengths[p.candidate]) continue;  // its prefix stopped earlier
    const double next_rate = (yield + p.survival) / cost.seconds(tokens + 1);
    if (!(next_rate > rate)) break;  // the first pair that does not pay ends the admission
    rate = next_rate;
    yield += p.survival;
    ++tokens;
    --room;
    ++lengths[p.candidate];
  }
  return lengths;
}

}  // namespace deepinfer::speculative
