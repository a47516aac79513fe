// KvCacheManager: request-level KV block accounting with prefix caching, over the model's KV
// groups (KvGroupSpec: layers that share one kind of block table).
//
// The scheduler asks, per request: how much of this prompt is already cached
// (find_cached_prefix), reserve room for n tokens (allocate_slots: false when a pool is short,
// then the scheduler waits or preempts), publish the blocks that became full (cache_full_blocks),
// drop blocks no query can see any more (free_out_of_window), and give everything back (free).
// Cached blocks of finished requests stay findable until the pool needs them (LRU, see
// block_pool.h).
//
// Groups. Every group has its own BlockPool and, per request, its own block table indexed by
// logical block (position / the group's block size). What a group does follows its kind:
//   kFull           every position stays for the request's life; full blocks are published
//                   to the prefix cache under chained keys.
//   kSlidingWindow  a query at position p sees p-window+1..p, so a block whose last position
//                   is below (next position to compute) - window + 1 can never be read again:
//                   it goes back to the pool while the request runs, and its table entry
//                   becomes kNoBlock (never read). Not prefix-cached: after a hit the engine
//                   rebuilds the window by recomputing ("SWA bounded replay",
//                   docs/adding-a-model.md), and blocks below the replay start are never
//                   allocated.
//   kCompressed     (DeepSeek V4) published and shared as kFull is; rows below a hit are never
//                   rewritten by the request that took it.
//   kCompressorState  (DeepSeek V4) a compressor's per-token frontier rows: released below
//                   its window (2m tokens for CSA, m for HCA) as kSlidingWindow blocks are, and
//                   not prefix-cached (the replay rebuilds them). Kept whole, they were the
//                   largest per-token cost of a V4 KV cache.
// Groups may have different block sizes (DeepSeek V4's compressed rows need larger blocks in
// tokens), each a multiple of the smallest, the base block. Keys are chained over base blocks;
// a prefix-cached group's block j is keyed by the chain at the base block that ends where it
// ends, so one key chain serves every group. A hit is the longest prefix that every
// prefix-cached group has cached, in whole blocks of each.
//
// Keys are chained (block_hash.h) over the token ids, with the model fingerprint and the
// request's cache salt as extras: requests with different salts never share a block.
//
// Single-threaded: owned by the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/kv_group_spec.h"
#include "deepinfer/status.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace deepinfer::kv {

using RequestId = uint64_t;

struct KvCacheConfig {
  // Groups in the order block tables are asked for; a group's kind, window, block_size and
  // n_blocks are read (the row shape is the backend's business).
  std::vector<KvGroupSpec> groups;
  bool enable_prefix_caching = true;
  std::string model_fingerprint;  // part of every block key
};

// A configuration of one full group: what a model without sliding layers has.
KvCacheConfig single_group_config(int64_t block_size, int64_t n_blocks, std::string model_fingerprint,
                                  bool enable_prefix_caching = true);

struct PrefixHit {
  std::vector<std::vector<BlockId>> blocks;  // per group: cached blocks covering the first n_tokens
  int64_t n_tokens = 0;
};

struct KvGroupStats {
  std::string name;
  KvGroupKind kind = KvGroupKind::kFull;
  int64_t n_blocks = 0;
  int64_t n_used = 0;     // referenced by requests
  int64_t n_cached = 0;   // findable by hash
  int64_t n_evicted = 0;  // cached blocks reused for other contents, since creation
};

struct KvCacheStats {
  BlockPoolStats pool;            // all groups together
  double usage = 0.0;             // fraction of blocks (all groups) referenced by requests
  int64_t prefix_queries = 0;     // prompt tokens looked up
  int64_t prefix_hits = 0;        // of those, tokens found cached
  std::vector<KvGroupStats> groups;  // in group order
};

class KvCacheManager {
 public:
  // INVALID_ARGUMENT for no groups, a block size that is not a multiple of the smallest, a
  // sliding group without a window, or a negative pool.
  static Status validate(const KvCacheConfig& config);
  explicit KvCacheManager(KvCacheConfig config);  // config must validate

  const KvCacheConfig& config() const { return config_; }
  int n_groups() const { return static_cast<int>(groups_.size()); }
  const KvGroupSpec& group(int g) const { return config_.groups[static_cast<size_t>(g)]; }
  // Whether some group is windowed (a sliding window, or a compressor's frontier), and the
  // largest window: what a replay after a prefix hit must cover.
  bool has_window_groups() const { return max_window_ > 0; }
  int64_t max_window() const { return max_window_; }
  // Every group's block size divides it: hits and computing starts are multiples of it.
  int64_t block_alignment() const { return alignment_; }
  // Blocks a request of n_tokens tokens holds in group g.
  int64_t n_blocks_for(int g, int64_t n_tokens) const;

  // The longest run of whole cached blocks at the start of `tokens`, in every prefix-cached
  // group. At most tokens.size() - 1 tokens are reported: the last prompt token is always
  // computed, because its logits are needed. Counts toward the hit statistics.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt);
  // The same lookup without counting it (a caller deciding whether to look elsewhere first).
  PrefixHit peek_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) const;

  // Tokens per base block: the smallest group's block size, the unit keys are chained over.
  int64_t base_block_size() const { return base_block_; }
  // The key chain of the first n_base base blocks of `tokens` (key b covers tokens
  // [0, (b + 1) * base_block_size())): what another cache of the same model files them under.
  std::vector<BlockHash> prefix_keys(std::span<const int32_t> tokens, std::string_view cache_salt,
                                     int64_t n_base) const;
  // The chain request `id` has published so far (cache_full_blocks), by base block.
  std::span<const BlockHash> published_keys(RequestId id) const;

  // Brings KV that another cache holds (the KV store) into this one: for every prefix-cached
  // group, the blocks covering tokens [n_from, n_to) (multiples of every such group's block
  // size) are allocated, written by fill(group, logical block, pool block) and published under
  // their keys, then released, so they sit in the prefix cache as a finished request's blocks
  // do. The cached blocks below n_from are held meanwhile, so the allocation cannot evict them.
  // Returns n_to, or n_from when the prefix below n_from is not all cached, a pool is short
  // or a fill fails (then nothing is published).
  using BlockFill = std::function<bool(int group, int64_t logical_block, BlockId block)>;
  int64_t import_prefix(std::span<const int32_t> tokens, std::string_view cache_salt, int64_t n_from, int64_t n_to,
                        const BlockFill& fill);

  // Grows request `id` to hold n_total_tokens in every group. On the request's first call `hit`
  // (from find_cached_prefix, or null) supplies the prefix-cached groups' leading blocks, and
  // `n_computed` says where computing starts (a multiple of block_alignment()): sliding groups
  // allocate nothing below it. Returns false, changing nothing, when a pool cannot supply the
  // missing blocks.
  bool allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit, int64_t n_computed = 0);

  // Publishes request `id`'s blocks of prefix-cached groups that tokens[0..n_computed) fill.
  void cache_full_blocks(RequestId id, std::span<const int32_t> tokens, int64_t n_computed,
                         std::string_view cache_salt);

  // Returns the windowed groups' blocks (sliding rings, compressor frontiers) that no query at
  // position >= n_computed can see.
  void free_out_of_window(RequestId id, int64_t n_computed);
  // Blocks of group g request `id` holds for positions below n_tokens.
  int64_t blocks_below(RequestId id, int g, int64_t n_tokens) const;

  // Releases every block of request `id` (tail first, so a chain's head outlives its tail in
  // the LRU queue). Unknown ids are ignored: cancellation may race with completion.
  void free(RequestId id);

  // Logical block -> pool block of group g; kNoBlock marks sliding entries out of the window.
  std::span<const BlockId> block_table(RequestId id, int g) const;
  KvCacheStats stats() const;

 private:
  struct RequestBlocks {
    std::vector<std::vector<BlockId>> tables;  // per group, logical order
    std::vector<int32_t> n_dropped;            // per group: leading entries already released
    std::vector<int64_t> n_published;          // per group: leading blocks already cached
    std::vector<BlockHash> hashes;             // the base-block key chain computed so far
  };

  std::string extras_for(std::string_view cache_salt) const;
  // Extends `hashes` to the first n_base base blocks of `tokens`.
  void extend_chain(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int64_t n_base,
                    const std::string& extras) const;
  int64_t base_blocks_per_block(int g) const { return group(g).block_size / base_block_; }

  KvCacheConfig config_;
  std::vector<BlockPool> groups_;  // one pool per group
  int64_t base_block_ = 0;
  int64_t alignment_ = 0;
  int64_t max_window_ = 0;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace deepinfer::kv
