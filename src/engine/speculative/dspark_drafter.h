// Drafts from DeepSeek V4.1's DSpark layers (DeepInfer's drafter): after each target pass they
// observe its features of the positions whose next token is known (their context rows, a window
// ring of their own); a sequence whose last observed chunk reached its last token then drafts a
// whole block in one pass: its last token is the block's anchor, the rest noise tokens, and the
// layers give block_size tokens with a confidence logit each (model.h, BlockDraftRunner).
//
// A draft's confidence is the sigmoid of its confidence logit (DSpark's estimate that the target
// accepts it given the drafts before); drafting stops where the product falls below
// min_survival. Drafts are greedy (the layers' argmax with the Markov bias), so verify.h's rule
// stays lossless at any temperature. Where the layers did not see the positions before a chunk
// (a prefix hit, a preemption) their window starts at the chunk, as for the MTP. Running out of
// draft KV blocks is normal: that sequence drafts nothing until its next chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/speculative/layer_drafter.h"
#include "model/model.h"

namespace deepinfer::speculative {

class DsparkDrafter final : public LayerDrafter {
 public:
  struct Parts {
    std::unique_ptr<BlockDraftRunner> runner;  // over the engine's target runner
    std::unique_ptr<backend::KvCache> kv;
    kv::KvCacheConfig kv_config;  // validated
  };
  DsparkDrafter(Parts parts, Limits limits);

  Status observe(std::span<const Chunk> chunks) override;
  Status propose(std::span<const DraftJob> jobs) override;
  void release(kv::RequestId id) override;

 private:
  void forget(kv::RequestId id);

  std::unique_ptr<BlockDraftRunner> runner_;
  std::unique_ptr<backend::KvCache> kv_;
  kv::KvCacheManager kv_manager_;
  Limits limits_;
  std::unordered_map<kv::RequestId, LayerWindow> states_;  // context rows [base, end) observed
  // Scratch of one pass.
  std::vector<int32_t> rows_, anchors_;
  std::vector<BatchSequence> batch_;
  std::vector<std::pair<kv::RequestId, LayerWindow*>> observed_;
  std::vector<const DraftJob*> drafting_;
};

}  // namespace deepinfer::speculative
