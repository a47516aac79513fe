#include "engine/speculative/sequence_drafter.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer::speculative {

namespace {

// Per-request tries hold one prompt and its output: shallower and smaller than the global one.
SuffixTrieOptions own_trie_options() {
  SuffixTrieOptions o;
  o.max_depth = 20;
  o.max_match = 10;
  o.max_nodes = int64_t{1} << 20;
  return o;
}

}  // namespace

SequenceDrafter::SequenceDrafter(SpeculativeMethod method) : method_(method) {
  if (method_ == SpeculativeMethod::kSuffix) own_ = std::make_unique<SuffixTrie>(own_trie_options());
}

Draft SequenceDrafter::propose(std::span<const int32_t> context, int32_t max_tokens, const SuffixTrie& global,
                               const AcceptanceStats& pooled) {
  DI_DCHECK(method_ != SpeculativeMethod::kDraft);  // the engine batches those through DraftModel
  Draft d = method_ == SpeculativeMethod::kSuffix ? propose_suffix(context, max_tokens, global)
                                                  : propose_ngram(context, max_tokens);
  for (int32_t j = 0; j < d.n; ++j) {
    d.confidence[static_cast<size_t>(j)] = stats_.rate(j, pooled.rate(j, kInitialAcceptance));
  }
  return d;
}

Draft SequenceDrafter::propose_suffix(std::span<const int32_t> context, int32_t max_tokens, const SuffixTrie& global) {
  // The own trie follows the context, a bounded slice per step; a full one stops growing.
  const auto len = static_cast<int64_t>(context.size());
  if (n_inserted_ < len && !own_->full()) {
    const int64_t n = std::min(kInsertPerStep, len - n_inserted_);
    own_->insert(cursor_, context.subspan(static_cast<size_t>(n_inserted_), static_cast<size_t>(n)));
    n_inserted_ += n;
  }
  int32_t own_match = 0;
  int32_t global_match = 0;
  Draft own = own_->propose(context, max_tokens, &own_match);
  Draft other = global.propose(context, max_tokens, &global_match);
  // The longer match is the better evidence; the request's own text wins a tie.
  return global_match > own_match ? other : own;
}

}  // namespace deepinfer::speculative
