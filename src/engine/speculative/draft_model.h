// A smaller model that shares the target's vocabulary drafts tokens for it (vLLM's draft-model
// speculation), run in the same engine on its own KV cache.
//
// Each sequence's draft KV follows the sequence's context: `fed` is the token list whose KV the
// draft cache holds, in order. A proposal first finds where fed and the sequence's context part
// (the target kept other tokens than the draft proposed, or the first proposal), feeds the
// context from there (a catch-up chunk, the whole prompt on the first proposal), then drafts
// greedily one token per pass: all sequences' catch-up chunks go in one pass, and each further
// draft position is one pass of one token per sequence still drafting. Rejected draft tokens
// are rolled back by moving the fed prefix only: their KV is overwritten by the next catch-up.
//
// Drafts are greedy (the draft's argmax), so each draft is one-hot and verify.h's rule stays
// lossless at any temperature. The confidence of a position is the draft's own probability of
// its token: the conditional acceptance at temperature 0 when the draft is calibrated. A draft
// stops where its survival (the product of those probabilities) falls below Limits::min_survival: the
// rest would cost draft passes for tokens the target seldom keeps.
//
// Running out of draft KV blocks is normal: that sequence drafts nothing this step. A
// catch-up longer than the step's catch-up budget is fed over several steps.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "engine/speculative/draft.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace deepinfer::speculative {

class DraftModel {
 public:
  struct Parts {
    std::unique_ptr<Model> model;
    std::unique_ptr<backend::KvCache> kv;
    kv::KvCacheConfig kv_config;  // validated
  };

  struct Limits {
    int64_t catch_up_budget = 0;  // context tokens one proposal feeds over all sequences at most
    int64_t max_context = 0;      // positions the draft computes (its trained context, its cache)
    int64_t n_vocab = 0;          // draft tokens are ids below it (the target's vocabulary too)
    float min_survival = 0.05f;   // a draft stops where its survival falls below this
  };
  DraftModel(Parts parts, Limits limits);

  using Job = DraftJob;

  // Drafts for all jobs at once. A failed pass is returned; the jobs then have no drafts and
  // their draft KV starts over.
  Status propose(std::span<const Job> jobs);

  // The sequence ended: its draft KV blocks go back.
  void release(kv::RequestId id);

  const Model& model() const { return *model_; }

 private:
  struct SequenceState {
    std::vector<int32_t> fed;  // tokens whose KV the draft cache holds, positions 0..
  };
  // One sequence in the pass being built.
  struct Active {
    const Job* job = nullptr;
    SequenceState* state = nullptr;
    int64_t first = 0;               // position of the pass's first token
    std::span<const int32_t> feed;   // the tokens this pass feeds
    bool drafts = false;             // catch-up complete: the pass's last row gives a draft token
    float survival = 1.0f;
  };

  bool plan_catch_up(const Job& job, SequenceState& state, int64_t* budget, Active* a);
  Status run_pass(std::span<const Active> active);
  void take_draft_token(Active& a, int64_t row);
  void forget(kv::RequestId id);

  std::unique_ptr<Model> model_;
  std::unique_ptr<backend::KvCache> kv_;
  kv::KvCacheManager kv_manager_;
  std::unique_ptr<BatchRunner> runner_;
  Limits limits_;
  std::unordered_map<kv::RequestId, SequenceState> states_;
  // Scratch of one pass.
  std::vector<Active> active_;
  std::vector<int32_t> tokens_;
  std::vector<BatchSequence> batch_;
};

}  // namespace deepinfer::speculative
