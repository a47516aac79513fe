// StepInputs: a forward pass's BatchSequence list, checked against the model and its KV cache
// and turned into the backend's StepBatch (per-group read and write limits, output rows).
// Shared by every architecture's BatchRunner; one per runner, reused step after step.
//
// Per group the limits follow its kind: a prefix-cached group reads every position and leaves
// rows below n_shared as they are (rows other sequences share); a sliding-window group reads
// nothing below replay_start (SWA bounded replay rebuilt the window from there).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "model/model.h"

namespace deepinfer {

class StepInputs {
 public:
  // INVALID_ARGUMENT naming the sequence for empty or negative chunks, replay limits past the
  // first position, block tables that are too short or name blocks outside their group's pool,
  // token counts that do not add up, and token ids outside [0, n_vocab).
  Status build(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
               const backend::KvCache& kv, int64_t n_kv_groups, int64_t n_vocab);

  const backend::StepBatch& batch() const { return batch_; }
  int64_t n_tokens() const { return static_cast<int64_t>(batch_.tokens.size()); }
  int64_t n_output_rows() const { return static_cast<int64_t>(output_rows_.size()); }
  // Whether every output row's sequence asked for LogitsMode::kLastArgmax (false without rows).
  bool argmax_only() const { return argmax_only_; }

 private:
  std::vector<backend::StepSequence> sequences_;
  std::vector<int32_t> output_rows_;
  bool argmax_only_ = false;
  backend::StepBatch batch_;
};

}  // namespace deepinfer
