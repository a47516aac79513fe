// KvCacheManager: request-level KV block accounting with prefix caching, for one cache group
// (every layer of the model sharing one block table).
//
// The scheduler asks, per request: how much of this prompt is already cached
// (find_cached_prefix), reserve room for n tokens (allocate_slots: false when the pool is short,
// then the scheduler waits or preempts), publish the blocks that became full (cache_full_blocks),
// and give everything back (free). Cached blocks of finished requests stay findable until the
// pool needs them (LRU, see block_pool.h).
//
// Keys are chained (block_hash.h) over the token ids, with the model fingerprint and the
// request's cache salt as extras: requests with different salts never share a block.
//
// Single-threaded: owned by the engine thread. Models with several layer types (sliding window,
// compressed rows) get one manager per group behind a coordinator; this class is the
// full-attention group.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace deepinfer::kv {

using RequestId = uint64_t;

struct KvCacheConfig {
  int32_t block_size = 16;  // tokens per block
  int32_t n_blocks = 0;
  bool enable_prefix_caching = true;
  std::string model_fingerprint;  // part of every block key
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached blocks covering the first n_tokens tokens
  int64_t n_tokens = 0;
};

struct KvCacheStats {
  BlockPoolStats pool;
  double usage = 0.0;             // fraction of blocks referenced by requests
  int64_t prefix_queries = 0;     // prompt tokens looked up
  int64_t prefix_hits = 0;        // of those, tokens found cached
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  const KvCacheConfig& config() const { return config_; }

  // The longest run of whole cached blocks at the start of `tokens`. At most tokens.size() - 1
  // tokens are reported: the last prompt token is always computed, because its logits are
  // needed. Counts toward the hit statistics.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt);

  // Grows request `id` to hold n_total_tokens. On the request's first call `hit` (from
  // find_cached_prefix, or null) supplies its leading blocks. Returns false, changing nothing,
  // when the pool cannot supply the missing blocks.
  bool allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit);

  // Publishes request `id`'s blocks that tokens[0..n_computed) fill completely.
  void cache_full_blocks(RequestId id, std::span<const int32_t> tokens, int64_t n_computed,
                         std::string_view cache_salt);

  // Releases every block of request `id` (tail first, so a chain's head outlives its tail in
  // the LRU queue). Unknown ids are ignored: cancellation may race with completion.
  void free(RequestId id);

  std::span<const BlockId> block_table(RequestId id) const;
  int32_t n_blocks_for(int64_t n_tokens) const {
    return static_cast<int32_t>((n_tokens + config_.block_size - 1) / config_.block_size);
  }
  KvCacheStats stats() const;

 private:
  struct RequestBlocks {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // keys of blocks[0..hashes.size()), all cached or attempted
  };

  std::string extras_for(std::string_view cache_salt) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace deepinfer::kv
