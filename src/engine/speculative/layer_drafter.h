// Drafts from the target model's own draft layers, run in the same engine on a KV cache of their
// own: DeepSeek V4's MTP layer (mtp_drafter.h) and V4.1's DSpark layers (dspark_drafter.h). Both
// see each target pass right after it (observe: the layers' rows of the positions it computed
// whose next token is known, while the target runner still holds that pass's states) and draft
// for the sequences whose last observed chunk reached their last token (propose).
#pragma once

#include <cstdint>
#include <span>

#include "deepinfer/status.h"
#include "engine/speculative/draft.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace deepinfer::speculative {

class LayerDrafter {
 public:
  virtual ~LayerDrafter() = default;

  struct Limits {
    int64_t n_vocab = 0;         // draft tokens are ids below it
    float min_survival = 0.05f;  // a draft stops where its survival falls below this
  };

  // One chunk of the target's last pass: positions [first, first + n) of sequence `id` at rows
  // [row, row + n) of the pass; `tokens` is the sequence after the step (sampled tokens
  // included), so positions up to tokens.size() - 2 have a next token.
  struct Chunk {
    kv::RequestId id = 0;
    int64_t first = 0;
    int64_t n = 0;
    int64_t row = 0;
    std::span<const int32_t> tokens;
  };
  // Right after the target's pass: the draft layers' rows of all chunks in one pass. A failed
  // pass is returned; those sequences' state starts over.
  virtual Status observe(std::span<const Chunk> chunks) = 0;

  // Drafts after each job's context for sequences whose last observed chunk reached their last
  // token in the pass just observed (others get none this step).
  virtual Status propose(std::span<const DraftJob> jobs) = 0;

  // The sequence ended: its draft KV blocks go back.
  virtual void release(kv::RequestId id) = 0;
};

// What both drafters keep of a sequence's draft-layer window: it starts at `base` (positions the
// layers saw from) and holds rows up to `end`.
struct LayerWindow {
  int64_t base = 0;
  int64_t end = 0;
};

// The start of an observed chunk of positions [first, last]: after a gap (positions the layers
// never saw) or a rewind below the window's start, the window starts over at the chunk; blocks
// below the chunk's window are freed and slots up to `last` taken (a fresh sequence's first
// block aligned down). False when a pool is short: the caller forgets the sequence.
bool begin_observed_chunk(kv::KvCacheManager& kv_manager, kv::RequestId id, bool fresh, int64_t first, int64_t last,
                          LayerWindow* window);

// One sequence of a draft-layer pass: n positions from `first`, with the layers' block tables
// (which stay put until the pass returns: nothing allocates meanwhile) and their window start.
BatchSequence draft_layer_sequence(const kv::KvCacheManager& kv_manager, kv::RequestId id, const LayerWindow& window,
                                   int64_t first, int64_t n, LogitsMode mode);

}  // namespace deepinfer::speculative
