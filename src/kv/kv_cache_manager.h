// KvCacheManager: request-level KV block accounting with prefix caching, over the model's KV
// cache groups (layers that share one kind of block table).
//
// The scheduler asks, per request: how much of this prompt is already cached
// (find_cached_prefix), reserve room for n tokens (allocate_slots: false when a pool is short,
// then the scheduler waits or preempts), publish the blocks that became full (cache_full_blocks),
// drop blocks no query can see any more (free_out_of_window), and give everything back (free).
// Cached blocks of finished requests stay findable until the pool needs them (LRU, see
// block_pool.h).
//
// Groups. Every group has its own BlockPool and, per request, its own block table indexed by
// logical block (position / block_size), so a position's block is found the same way in every
// group:
//   kFull           every position stays for the request's life; full blocks are published
//                   to the prefix cache under chained keys. Global attention layers, and all
//                   layers of a model without sliding layers (which then behaves as before).
//   kSlidingWindow  a query at position p sees p-window+1..p, so a block whose last position
//                   is below (next position to compute) - window + 1 can never be read again:
//                   it goes back to the pool while the request runs, and its table entry
//                   becomes kNoBlock (never read). Not prefix-cached: after a hit on the full
//                   group the engine rebuilds the window by recomputing ("SWA bounded replay",
//                   docs/adding-a-model.md), and blocks below the replay start are never
//                   allocated.
// A third kind fits the same shape: DeepSeek V4's compressed rows (one row per m tokens,
// append-only, a function of the prefix) would be a prefix-cached group whose block holds the
// rows of block_size * m tokens, with its own pool sized by its row bytes. It is not built.
// Block sizes in tokens are equal across groups so logical indices agree.
//
// Keys are chained (block_hash.h) over the token ids, with the model fingerprint and the
// request's cache salt as extras: requests with different salts never share a block.
//
// Single-threaded: owned by the engine thread.
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

enum class KvGroupKind { kFull, kSlidingWindow };

// Group indices: the full group always exists; the sliding group when sliding_window > 0.
inline constexpr int kFullGroup = 0;
inline constexpr int kSlidingGroup = 1;

struct KvCacheConfig {
  int32_t block_size = 16;  // tokens per block, every group
  int32_t n_blocks = 0;     // full group
  bool enable_prefix_caching = true;
  std::string model_fingerprint;  // part of every block key
  // Sliding-window group (layers that see only the last `sliding_window` positions, the query
  // included): absent when 0.
  int64_t sliding_window = 0;
  int32_t n_sliding_blocks = 0;
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached blocks covering the first n_tokens tokens
  int64_t n_tokens = 0;
};

struct KvGroupStats {
  KvGroupKind kind = KvGroupKind::kFull;
  int64_t n_blocks = 0;
  int64_t n_used = 0;  // referenced by requests
};

struct KvCacheStats {
  BlockPoolStats pool;            // all groups together
  double usage = 0.0;             // fraction of blocks (all groups) referenced by requests
  int64_t prefix_queries = 0;     // prompt tokens looked up
  int64_t prefix_hits = 0;        // of those, tokens found cached
  std::vector<KvGroupStats> groups;  // indexed by group (kFullGroup, kSlidingGroup)
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  const KvCacheConfig& config() const { return config_; }
  int n_groups() const { return static_cast<int>(groups_.size()); }
  bool has_sliding_group() const { return n_groups() > kSlidingGroup; }

  // The longest run of whole cached blocks at the start of `tokens` (full group). At most
  // tokens.size() - 1 tokens are reported: the last prompt token is always computed, because
  // its logits are needed. Counts toward the hit statistics.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt);

  // Grows request `id` to hold n_total_tokens in every group. On the request's first call `hit`
  // (from find_cached_prefix, or null) supplies the full group's leading blocks, and
  // `n_computed` says where computing starts (a multiple of block_size): the sliding group
  // allocates nothing below it. Returns false, changing nothing, when a pool cannot supply the
  // missing blocks.
  bool allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit, int64_t n_computed = 0);

  // Publishes request `id`'s full-group blocks that tokens[0..n_computed) fill completely.
  void cache_full_blocks(RequestId id, std::span<const int32_t> tokens, int64_t n_computed,
                         std::string_view cache_salt);

  // Returns the sliding group's blocks that no query at position >= n_computed can see.
  void free_out_of_window(RequestId id, int64_t n_computed);
  // Sliding-group blocks request `id` holds for positions below n_tokens.
  int64_t sliding_blocks_below(RequestId id, int64_t n_tokens) const;

  // Releases every block of request `id` (tail first, so a chain's head outlives its tail in
  // the LRU queue). Unknown ids are ignored: cancellation may race with completion.
  void free(RequestId id);

  // Logical block -> pool block of `group`; kNoBlock marks sliding entries out of the window.
  std::span<const BlockId> block_table(RequestId id, int group = kFullGroup) const;
  int32_t n_blocks_for(int64_t n_tokens) const {
    return static_cast<int32_t>((n_tokens + config_.block_size - 1) / config_.block_size);
  }
  KvCacheStats stats() const;

 private:
  struct Group {
    KvGroupKind kind;
    int64_t window;  // sliding group
    BlockPool pool;
  };
  struct RequestBlocks {
    std::vector<BlockId> blocks[2];   // per group, logical order
    int32_t n_dropped = 0;            // leading sliding entries already released (kNoBlock)
    std::vector<BlockHash> hashes;    // full-group keys of blocks[0..hashes.size())
  };

  std::string extras_for(std::string_view cache_salt) const;

  KvCacheConfig config_;
  std::vector<Group> groups_;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace deepinfer::kv
