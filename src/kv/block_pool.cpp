#include "kv/block_pool.h"

#include "core/check.h"

namespace deepinfer::kv {

BlockPool::BlockPool(int32_t n_blocks) : blocks_(static_cast<size_t>(n_blocks)) {
  DI_ICHECK(n_blocks >= 0);
  for (BlockId id = 0; id < n_blocks; ++id) push_free_tail(id);
}

void BlockPool::push_free_tail(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  b.prev = free_tail_;
  b.next = kNoBlock;
  if (free_tail_ != kNoBlock) {
    blocks_[static_cast<size_t>(free_tail_)].next = id;
  } else {
    free_head_ = id;
  }
  free_tail_ = id;
  ++n_free_;
}

void BlockPool::unlink_free(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.prev != kNoBlock) {
    blocks_[static_cast<size_t>(b.prev)].next = b.next;
  } else {
    free_head_ = b.next;
  }
  if (b.next != kNoBlock) {
    blocks_[static_cast<size_t>(b.next)].prev = b.prev;
  } else {
    free_tail_ = b.prev;
  }
  b.prev = b.next = kNoBlock;
  --n_free_;
}

void BlockPool::evict_hash(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end() && it->second == id) cached_.erase(it);
  b.hash.reset();
  ++n_evicted_;
}

bool BlockPool::allocate(int32_t n, std::vector<BlockId>& out) {
  DI_ICHECK(n >= 0);
  if (n > n_free_) return false;
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = free_head_;
    unlink_free(id);
    evict_hash(id);
    blocks_[static_cast<size_t>(id)].ref_count = 1;
    out.push_back(id);
  }
  return true;
}

std::optional<BlockId> BlockPool::find_cached(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::acquire(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.ref_count == 0) {
    DI_ICHECK(b.hash.has_value());  // only cached blocks can be found while free
    unlink_free(id);
  }
  ++b.ref_count;
}

void BlockPool::release(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  DI_ICHECK(b.ref_count > 0);
  if (--b.ref_count == 0) push_free_tail(id);
}

void BlockPool::cache(BlockId id, const BlockHash& hash) {
  Block& b = blocks_[static_cast<size_t>(id)];
  DI_ICHECK(b.ref_count > 0);
  if (b.hash) {
    DI_ICHECK(*b.hash == hash);  // a block's contents never change once full
    return;
  }
  if (cached_.count(hash)) return;
  b.hash = hash;
  cached_.emplace(hash, id);
}

BlockPoolStats BlockPool::stats() const {
  return {static_cast<int64_t>(blocks_.size()), n_free_, static_cast<int64_t>(cached_.size()), n_evicted_};
}

}  // namespace deepinfer::kv
