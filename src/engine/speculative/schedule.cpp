#include "engine/speculative/schedule.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::speculative {

void StepCostModel::observe(int64_t chunks, int64_t tokens, double seconds) {
  if (!(seconds > 0.0) || chunks < 1 || tokens < chunks) return;
  const auto x1 = static_cast<double>(chunks), x2 = static_cast<double>(tokens - chunks);
  weight_ = weight_ * kDecay + 1.0;
  s1_ = s1_ * kDecay + x1;
  s2_ = s2_ * kDecay + x2;
  s11_ = s11_ * kDecay + x1 * x1;
  s22_ = s22_ * kDecay + x2 * x2;
  s12_ = s12_ * kDecay + x1 * x2;
  st_ = st_ * kDecay + seconds;
  s1t_ = s1t_ * kDecay + x1 * seconds;
  s2t_ = s2t_ * kDecay + x2 * seconds;
}

// Least squares of t on (x1, x2) with a ridge towards the prior (both slopes prior_ratio * t0):
// directions the steps seen barely varied along say nothing about their slope, and a little of
// the prior always stays, so one noisy step cannot make rows look free (or negative).
StepCostModel::Costs StepCostModel::costs() const {
  if (empty()) return {1.0, 0.0, 0.0};
  const double w = weight_;
  const double m1 = s1_ / w, m2 = s2_ / w, mt = st_ / w;
  const double c11 = s11_ / w - m1 * m1, c22 = s22_ / w - m2 * m2, c12 = s12_ / w - m1 * m2;
  const double c1t = s1t_ / w - m1 * mt, c2t = s2t_ / w - m2 * mt;
  const double prior = prior_ratio_ * mt / (1.0 + prior_ratio_ * (m1 + m2));  // a slope if both = ratio * t0
  constexpr double kRidge = 4.0;
  const double a11 = c11 + kRidge, a22 = c22 + kRidge, a12 = c12;
  const double r1 = c1t + kRidge * prior, r2 = c2t + kRidge * prior;
  const double det = a11 * a22 - a12 * a12;  // > 0: the ridge keeps the system definite
  const double tc = std::max(0.05 * prior, (r1 * a22 - r2 * a12) / det);
  const double tt = std::max(0.05 * prior, (a11 * r2 - a12 * r1) / det);
  return {std::max(1e-6, mt - tc * m1 - tt * m2), tc, tt};
}

std::vector<int32_t> choose_draft_lengths(std::span<const DraftCandidate> candidates, int64_t base_chunks,
                                          int64_t base_tokens, double base_yield, int64_t max_draft_tokens,
                                          const StepCostModel& cost) {
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
  const StepCostModel::Costs costs = cost.costs();
  const int64_t chunks = std::max<int64_t>(1, base_chunks);
  int64_t tokens = std::max(base_tokens, chunks);
  double yield = base_yield;
  double rate = yield / costs.seconds(chunks, tokens);
  int64_t room = max_draft_tokens;
  for (const Pair& p : pairs) {
    if (room == 0) break;
    if (p.position != lengths[p.candidate]) continue;  // its prefix stopped earlier
    const double next_rate = (yield + p.survival) / costs.seconds(chunks, tokens + 1);
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
