#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer::kv {

KvCacheManager::KvCacheManager(KvCacheConfig config) : config_(std::move(config)) {
  DI_ICHECK(config_.block_size > 0 && config_.sliding_window >= 0);
  groups_.push_back({KvGroupKind::kFull, 0, BlockPool(config_.n_blocks)});
  if (config_.sliding_window > 0) {
    groups_.push_back({KvGroupKind::kSlidingWindow, config_.sliding_window, BlockPool(config_.n_sliding_blocks)});
  }
}

std::string KvCacheManager::extras_for(std::string_view cache_salt) const {
  std::string extras = config_.model_fingerprint;
  extras.push_back('\0');
  extras.append(cache_salt);
  return extras;
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  PrefixHit hit;
  prefix_queries_ += static_cast<int64_t>(tokens.size());
  if (!config_.enable_prefix_caching || tokens.empty()) return hit;
  const std::string extras = extras_for(cache_salt);
  const int64_t bs = config_.block_size;
  const int64_t max_blocks = static_cast<int64_t>(tokens.size() - 1) / bs;
  const BlockPool& pool = groups_[kFullGroup].pool;
  BlockHash parent;
  for (int64_t b = 0; b < max_blocks; ++b) {
    const BlockHash h = hash_block(b == 0 ? nullptr : &parent, tokens.subspan(b * bs, bs), extras);
    auto id = pool.find_cached(h);
    if (!id) break;
    hit.blocks.push_back(*id);
    parent = h;
  }
  hit.n_tokens = static_cast<int64_t>(hit.blocks.size()) * bs;
  prefix_hits_ += hit.n_tokens;
  return hit;
}

bool KvCacheManager::allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit, int64_t n_computed) {
  auto it = requests_.find(id);
  const bool is_new = it == requests_.end();
  const int32_t n_total_blocks = n_blocks_for(n_total_tokens);

  // Full group: hit blocks first (new requests), then fresh ones.
  BlockPool& full = groups_[kFullGroup].pool;
  const int32_t n_have = is_new ? 0 : static_cast<int32_t>(it->second.blocks[kFullGroup].size());
  const int32_t n_from_hit = is_new && hit ? static_cast<int32_t>(hit->blocks.size()) : 0;
  const int32_t n_need = std::max(0, n_total_blocks - n_have - n_from_hit);
  // Revived hit blocks leave the free queue too, so they count against what is free.
  int32_t n_hit_free = 0;
  for (int32_t i = 0; i < n_from_hit; ++i) n_hit_free += full.ref_count(hit->blocks[static_cast<size_t>(i)]) == 0;
  if (n_need + n_hit_free > full.n_free()) return false;

  // Sliding group: a new request's table starts at the block where computing starts (nothing
  // below it will be written or read); later calls append.
  int32_t n_sliding_skip = 0, n_sliding_need = 0;
  if (has_sliding_group()) {
    DI_ICHECK(n_computed % config_.block_size == 0);
    const int32_t n_sliding_have =
        is_new ? 0 : static_cast<int32_t>(it->second.blocks[kSlidingGroup].size());
    if (is_new) n_sliding_skip = static_cast<int32_t>(n_computed / config_.block_size);
    n_sliding_need = std::max(0, n_total_blocks - n_sliding_have - n_sliding_skip);
    if (n_sliding_need > groups_[kSlidingGroup].pool.n_free()) return false;
  }

  RequestBlocks& req = is_new ? requests_[id] : it->second;
  for (int32_t i = 0; i < n_from_hit; ++i) {
    full.acquire(hit->blocks[static_cast<size_t>(i)]);
    req.blocks[kFullGroup].push_back(hit->blocks[static_cast<size_t>(i)]);
  }
  bool ok = full.allocate(n_need, req.blocks[kFullGroup]);
  DI_ICHECK(ok);
  if (has_sliding_group()) {
    std::vector<BlockId>& table = req.blocks[kSlidingGroup];
    if (is_new) {
      table.assign(static_cast<size_t>(n_sliding_skip), kNoBlock);
      req.n_dropped = n_sliding_skip;
    }
    ok = groups_[kSlidingGroup].pool.allocate(n_sliding_need, table);
    DI_ICHECK(ok);
  }
  return true;
}

void KvCacheManager::cache_full_blocks(RequestId id, std::span<const int32_t> tokens, int64_t n_computed,
                                       std::string_view cache_salt) {
  if (!config_.enable_prefix_caching) return;
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& req = it->second;
  const std::vector<BlockId>& blocks = req.blocks[kFullGroup];
  const int64_t bs = config_.block_size;
  const int64_t n_full = std::min<int64_t>(n_computed / bs, static_cast<int64_t>(blocks.size()));
  if (static_cast<int64_t>(req.hashes.size()) >= n_full) return;
  const std::string extras = extras_for(cache_salt);
  for (int64_t b = static_cast<int64_t>(req.hashes.size()); b < n_full; ++b) {
    const BlockHash h = hash_block(b == 0 ? nullptr : &req.hashes[static_cast<size_t>(b - 1)],
                                   tokens.subspan(b * bs, bs), extras);
    groups_[kFullGroup].pool.cache(blocks[static_cast<size_t>(b)], h);
    req.hashes.push_back(h);
  }
}

int64_t KvCacheManager::sliding_blocks_below(RequestId id, int64_t n_tokens) const {
  if (!has_sliding_group()) return 0;
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  const std::vector<BlockId>& table = it->second.blocks[kSlidingGroup];
  // Entries below n_dropped are all released: a long context's table is mostly those.
  const auto n = std::min<size_t>(table.size(), static_cast<size_t>(n_blocks_for(n_tokens)));
  const auto from = std::min<size_t>(n, static_cast<size_t>(it->second.n_dropped));
  return std::count_if(table.begin() + static_cast<std::ptrdiff_t>(from), table.begin() + static_cast<std::ptrdiff_t>(n),
                       [](BlockId b) { return b != kNoBlock; });
}

void KvCacheManager::free_out_of_window(RequestId id, int64_t n_computed) {
  if (!has_sliding_group()) return;
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& req = it->second;
  std::vector<BlockId>& table = req.blocks[kSlidingGroup];
  // The next query sits at n_computed and sees from n_computed - window + 1 on; block b ends at
  // (b + 1) * block_size - 1.
  const int64_t first_visible = n_computed - groups_[kSlidingGroup].window + 1;
  const int64_t n_dead = std::clamp<int64_t>(first_visible / config_.block_size, 0, static_cast<int64_t>(table.size()));
  for (int64_t b = req.n_dropped; b < n_dead; ++b) {
    BlockId& block = table[static_cast<size_t>(b)];
    if (block != kNoBlock) groups_[kSlidingGroup].pool.release(block);
    block = kNoBlock;
  }
  req.n_dropped = std::max<int32_t>(req.n_dropped, static_cast<int32_t>(n_dead));
}

void KvCacheManager::free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (int g = 0; g < n_groups(); ++g) {
    const auto& blocks = it->second.blocks[g];
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (*b != kNoBlock) groups_[static_cast<size_t>(g)].pool.release(*b);
    }
  }
  requests_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId id, int group) const {
  DI_ICHECK(group >= 0 && group < n_groups());
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.blocks[group];
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  for (const Group& g : groups_) {
    const BlockPoolStats p = g.pool.stats();
    s.pool.n_blocks += p.n_blocks;
    s.pool.n_free += p.n_free;
    s.pool.n_cached += p.n_cached;
    s.pool.n_evicted += p.n_evicted;
    s.groups.push_back({g.kind, p.n_blocks, p.n_blocks - p.n_free});
  }
  s.usage = s.pool.n_blocks == 0 ? 0.0 : 1.0 - static_cast<double>(s.pool.n_free) / static_cast<double>(s.pool.n_blocks);
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  return s;
}

}  // namespace deepinfer::kv
