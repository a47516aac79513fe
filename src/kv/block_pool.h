// BlockPool: the physical KV blocks of one cache group, as metadata only (ids, reference counts,
// cached hashes). It never touches KV memory; the model runner indexes its KV tensors by the
// block ids handed out here.
//
// Free blocks sit in one queue ordered by when they were freed. Allocation takes from the head
// (least recently freed). A block freed while it holds a cached prefix keeps its hash and stays
// findable until allocation reuses it: that is the LRU eviction of the prefix cache, and a hit
// on such a block "revives" it by taking it out of the queue. The queue is an intrusive doubly
// linked list through the blocks so that revival is O(1).
//
// Single-threaded: owned by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace deepinfer::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

struct BlockPoolStats {
  int64_t n_blocks = 0;
  int64_t n_free = 0;         // blocks with no reference (cached ones included)
  int64_t n_cached = 0;       // blocks findable by hash
  int64_t n_evicted = 0;      // cached blocks reused for other contents, since creation
};

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t n_free() const { return n_free_; }

  // Appends n fresh blocks (reference count 1) to `out`. Returns false and takes nothing when
  // fewer than n are free: running out is a normal outcome the scheduler handles.
  bool allocate(int32_t n, std::vector<BlockId>& out);

  // The block holding the KV of `hash`, if any (in use or free-but-cached).
  std::optional<BlockId> find_cached(const BlockHash& hash) const;

  // One more reference; a free cached block leaves the free queue (revival).
  void acquire(BlockId id);
  // One reference less; at zero the block joins the free queue's tail, keeping its hash.
  void release(BlockId id);

  // Indexes a full block under `hash`. When another block already holds that hash the index is
  // left alone: block tables are append-only, so the duplicate simply stays private.
  void cache(BlockId id, const BlockHash& hash);

  int32_t ref_count(BlockId id) const { return blocks_[static_cast<size_t>(id)].ref_count; }
  bool is_cached(BlockId id) const { return blocks_[static_cast<size_t>(id)].hash.has_value(); }
  BlockPoolStats stats() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    BlockId prev = kNoBlock;  // free-queue links, meaningful while ref_count == 0
    BlockId next = kNoBlock;
  };

  void push_free_tail(BlockId id);
  void unlink_free(BlockId id);
  void evict_hash(BlockId id);

  std::vector<Block> blocks_;
  BlockId free_head_ = kNoBlock;
  BlockId free_tail_ = kNoBlock;
  int32_t n_free_ = 0;
  int64_t n_evicted_ = 0;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> cached_;
};

}  // namespace deepinfer::kv
