// One sequence's drafter: the method's proposal, with the sequence's acceptance statistics as
// the confidence of each draft position.
//
// Confidence: n-gram matches carry no probability of their own, so every method takes the
// sequence's decayed acceptance rate per draft position (AcceptanceStats), shrunk towards the
// method's rate over all sequences; for suffix drafts the trie's continuation share already
// cut the draft where it turned unlikely. The survival of position j is the product of the
// confidences up to j.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/speculative/acceptance.h"
#include "engine/speculative/draft.h"
#include "engine/speculative/ngram_drafter.h"
#include "engine/speculative/suffix_trie.h"

namespace deepinfer::speculative {

class SequenceDrafter {
 public:
  explicit SequenceDrafter(SpeculativeMethod method);

  SpeculativeMethod method() const { return method_; }

  // Up to max_tokens draft tokens after `context` (the sequence's prompt and generated tokens),
  // with their confidences. `global`: the suffix trie of earlier requests' outputs (kSuffix).
  // `pooled`: the method's statistics over all sequences, the prior.
  Draft propose(std::span<const int32_t> context, int32_t max_tokens, const SuffixTrie& global,
                const AcceptanceStats& pooled);
  void record(int32_t n_drafted, int32_t n_accepted) { stats_.record(n_drafted, n_accepted); }

 private:
  // Context tokens the own trie takes per step at most: a long prompt is taken over several
  // steps rather than stalling one (until then its later part is not matched).
  static constexpr int64_t kInsertPerStep = 2048;

  Draft propose_suffix(std::span<const int32_t> context, int32_t max_tokens, const SuffixTrie& global);

  SpeculativeMethod method_;
  AcceptanceStats stats_;
  std::unique_ptr<SuffixTrie> own_;  // kSuffix: the sequence's own tokens
  SuffixTrie::Cursor cursor_;
  int64_t n_inserted_ = 0;
};

// The prior rate for a method before anything was verified: optimistic enough that drafting
// starts, and quickly corrected by the statistics.
inline constexpr float kInitialAcceptance = 0.6f;

}  // namespace deepinfer::speculative
