// When sequences drafting with a model (a draft model, V4's MTP, V4.1's DSpark) propose.
//
// A model drafter pays a pass per proposal whether or not its draft is kept. Two bounds:
// - per sequence (DraftBackOff): after a proposal that kept nothing (rejected, or not worth
//   verifying) the sequence skips 1, 2, 4 .. 128 steps; a kept draft token ends its back-off;
// - per engine (FailedDraftBudget): a sequence whose last proposal kept nothing proposes again
//   only while the passes of proposals that kept nothing take at most kShare of the time of the
//   steps that had model-drafting sequences decoding. A sequence's first proposal, and those
//   after a proposal that kept something, do not wait for the budget: one dear miss early in
//   an engine's life (a cold first pass, a long prompt's catch-up in a draft model) must not
//   keep every later sequence from trying, nor stop drafts that pay.
// The skips bound how often a sequence proposes, not what that costs: where a pass costs
// several target steps (a DSpark block's lm_head rows, a draft model as large as its target),
// skips alone let failed passes take a fifth of a short answer's time. The budget is the
// engine's, not each sequence's: every sequence's time holds every pass, so shares per sequence
// would add up with the number of sequences proposing out of step.
#pragma once

#include <cstdint>

namespace deepinfer::speculative {

class FailedDraftBudget;

class DraftBackOff {
 public:
  // Before a step: whether the sequence proposes (its skip is over and, after a miss, the
  // budget allows). Counts the step against the skip when that is not over.
  bool may_propose(const FailedDraftBudget& budget);
  // Its share of the pass that made its proposal.
  void charge(double pass_seconds) { pending_seconds_ = pass_seconds; }
  // The proposal's outcome: some draft token kept, or none. missed() returns the share of the
  // pass that was spent for nothing.
  void kept();
  double missed();

 private:
  static constexpr int32_t kMaxDoublings = 7;  // 128 steps
  int32_t misses_ = 0;
  int32_t skip_ = 0;
  double pending_seconds_ = 0.0;  // the last proposal's pass, until its outcome
};

class FailedDraftBudget {
 public:
  static constexpr double kShare = 0.05;

  // A step that had model-drafting sequences decoding took `seconds`.
  void elapse(double seconds) { elapsed_ += seconds; }
  void fail(double seconds) { failed_ += seconds; }
  bool allows_proposals() const { return failed_ <= kShare * elapsed_; }

 private:
  double elapsed_ = 0.0;
  double failed_ = 0.0;
};

}  // namespace deepinfer::speculative
