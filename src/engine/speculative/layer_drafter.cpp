#include "engine/speculative/layer_drafter.h"

namespace deepinfer::speculative {

bool begin_observed_chunk(kv::KvCacheManager& kv_manager, kv::RequestId id, bool fresh, int64_t first, int64_t last,
                          LayerWindow* window) {
  if (fresh || first > window->end || first < window->base) window->base = first;
  window->end = first;
  kv_manager.free_out_of_window(id, first);
  const int64_t align = kv_manager.block_alignment();
  const int64_t start = fresh ? first / align * align : 0;
  return kv_manager.allocate_slots(id, last + 1, nullptr, start);
}

BatchSequence draft_layer_sequence(const kv::KvCacheManager& kv_manager, kv::RequestId id, const LayerWindow& window,
                                   int64_t first, int64_t n, LogitsMode mode) {
  BatchSequence b;
  b.n_tokens = n;
  b.first_position = first;
  b.logits = mode;
  b.replay_start = window.base;
  for (int g = 0; g < kv_manager.n_groups(); ++g) b.block_tables[static_cast<size_t>(g)] = kv_manager.block_table(id, g);
  return b;
}

}  // namespace deepinfer::speculative
