// Drafts from the target model's own draft layers (DeepSeek V4's MTP layer; vLLM's `mtp`
// method), run in the same engine on a KV cache of their own.
//
// The MTP row at position p reads the target's hidden state at p and the token at p + 1, and
// predicts the token at p + 2 (model.h, DraftHeadRunner). So after each target pass the rows of
// every position it computed whose next token is known can run, with no hidden state kept
// across steps: observe() runs them right after the pass and its sampling, while the target
// runner still holds that pass's hidden states. A verification pass computed the accepted
// positions and the rejected ones; only the accepted ones have a next token, so rejected drafts
// never reach the MTP's KV. A sequence whose chunk reached its last token gets its first draft
// from that pass's last row; propose() then chains the rest, one pass per draft position over
// all drafting sequences, each row on its own previous row's output and draft token. Chained
// rows' KV sits past the true rows and is overwritten by the next observe.
//
// Where the MTP did not see the positions before a chunk (a prefix-cache hit, a preemption), its
// window starts at the chunk (BatchSequence::replay_start): drafts then see less context, and
// verification keeps the output exact whatever they are.
//
// Drafts are greedy (the MTP's argmax), so each is one-hot and verify.h's rule stays lossless at
// any temperature; the confidence of a position is the MTP's probability of its token. Running
// out of MTP KV blocks is normal: that sequence drafts nothing until its next chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "engine/speculative/draft.h"
#include "engine/speculative/layer_drafter.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace deepinfer::speculative {

class MtpDrafter final : public LayerDrafter {
 public:
  struct Parts {
    std::unique_ptr<DraftHeadRunner> runner;  // over the engine's target runner
    std::unique_ptr<backend::KvCache> kv;
    kv::KvCacheConfig kv_config;  // validated
  };
  MtpDrafter(Parts parts, Limits limits);

  using Job = DraftJob;
  Status observe(std::span<const Chunk> chunks) override;
  Status propose(std::span<const Job> jobs) override;
  void release(kv::RequestId id) override;

 private:
  struct SequenceState {
    LayerWindow window;  // rows [base, end) hold the target's hidden states (true rows)
    // From the pass that last ran, when it was an observe that reached the last token:
    uint64_t ready_pass = 0;  // that pass's serial (0: none)
    int64_t ready_context = 0;
    int32_t row = 0;          // the row whose output streams the next draft reads
    int32_t token = 0;        // the first draft and its probability
    float p = 0.0f;
  };
  struct Active {
    const Job* job = nullptr;
    SequenceState* state = nullptr;
    float survival = 1.0f;
    int32_t row = 0;  // its row in the last pass
  };

  void forget(kv::RequestId id);

  std::unique_ptr<DraftHeadRunner> runner_;
  std::unique_ptr<backend::KvCache> kv_;
  kv::KvCacheManager kv_manager_;
  Limits limits_;
  uint64_t pass_ = 0;  // serial of the runner's last pass
  std::unordered_map<kv::RequestId, SequenceState> states_;
  // Scratch of one pass.
  std::vector<int32_t> tokens_, rows_;
  std::vector<BatchSequence> batch_;
  std::vector<std::pair<kv::RequestId, SequenceState*>> observed_;  // batch_'s sequences
  std::vector<Active> active_;
};

}  // namespace deepinfer::speculative
