// How many draft tokens each sequence verifies this step (DSpark's prefix scheduler).
//
// A step of C chunks (one per scheduled sequence) holding B tokens takes about
// t = t0 + tc * C + tt * (B - C) seconds (StepCostModel, fitted online from the engine's own
// steps: the "profiled steps-per-second curve"). A chunk's first token and its further ones are
// priced apart because they cost differently: a decoding sequence's row brings its own KV
// reads, sampling and bookkeeping, while a draft row (or a prompt token) is one more row of a
// chunk that has them already; one line through tokens alone, fitted over prefill and decode
// steps, priced draft rows at decode sizes wrongly either way.
//
// Each decoding sequence yields one token per step and, when it verifies a draft prefix of
// length l, expects sum_{j<=l} a_j more, a_j being the survival probability of draft position j
// (the product of the conditional acceptances up to j). choose_draft_lengths maximises expected
// tokens per second, tau / t, by admitting (sequence, position) pairs in order of survival and
// stopping at the first that does not raise it: survivals fall along a draft, so what is
// admitted is a prefix of each draft. With many sequences decoding, tau is large and tt weighs
// more: a busy engine verifies only its likeliest drafts; an idle one verifies far.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/speculative/draft.h"

namespace deepinfer::speculative {

class StepCostModel {
 public:
  // `prior_per_token`: tc / t0 and tt / t0 until the steps seen vary enough to fit them.
  explicit StepCostModel(double prior_per_token = 0.1) : prior_ratio_(prior_per_token) {}
  // A step of `chunks` chunks and `tokens` tokens in all (tokens >= chunks >= 1) took `seconds`.
  void observe(int64_t chunks, int64_t tokens, double seconds);
  bool empty() const { return weight_ < 1e-9; }

  // The fitted costs (fitted when asked: take them once per decision).
  struct Costs {
    double t0 = 1.0;  // seconds of a step
    double tc = 0.0;  // per chunk: a chunk's first token
    double tt = 0.0;  // per further token of a chunk
    double seconds(int64_t chunks, int64_t tokens) const {
      return t0 + tc * static_cast<double>(chunks) + tt * static_cast<double>(tokens - chunks);
    }
  };
  Costs costs() const;

 private:

  static constexpr double kDecay = 0.99;  // about the last hundred steps
  double prior_ratio_;
  // Decayed sums over steps of x1 = chunks, x2 = tokens - chunks and t = seconds.
  double weight_ = 0, s1_ = 0, s2_ = 0, s11_ = 0, s22_ = 0, s12_ = 0, st_ = 0, s1t_ = 0, s2t_ = 0;
};

// One speculating sequence's proposal: its draft's survival probabilities, best first.
struct DraftCandidate {
  std::span<const float> survival;  // [draft length], non-increasing
};

// The number of draft tokens to verify for each candidate. `base_chunks` and `base_tokens`: the
// step's chunks and tokens without drafts; `base_yield`: tokens the step yields without drafts
// (its decoding sequences); `max_draft_tokens`: the step's room for drafts.
std::vector<int32_t> choose_draft_lengths(std::span<const DraftCandidate> candidates, int64_t base_chunks,
                                          int64_t base_tokens, double base_yield, int64_t max_draft_tokens,
                                          const StepCostModel& cost);

}  // namespace deepinfer::speculative
