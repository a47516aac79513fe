// KV cache configurations tests build by hand.
#pragma once

#include <string>

#include "kv/kv_cache_manager.h"

namespace deepinfer::kv {

// The groups of a model with sliding layers (Gemma 3): full and sliding, as the engine makes them.
inline KvCacheConfig two_group_config(int64_t block_size, int64_t n_full, int64_t window, int64_t n_sliding,
                                      std::string fingerprint, bool prefix_caching = true) {
  KvCacheConfig c = single_group_config(block_size, n_full, std::move(fingerprint), prefix_caching);
  KvGroupSpec sliding = c.groups[0];
  sliding.name = "sliding";
  sliding.kind = KvGroupKind::kSlidingWindow;
  sliding.window = window;
  sliding.n_blocks = n_sliding;
  c.groups.push_back(std::move(sliding));
  return c;
}
inline constexpr int kFullGroup = 0;
inline constexpr int kSlidingGroup = 1;

}  // namespace deepinfer::kv
