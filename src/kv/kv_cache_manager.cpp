#include "kv/kv_cache_manager.h"

#include "core/check.h"

namespace deepinfer::kv {

KvCacheManager::KvCacheManager(KvCacheConfig config) : config_(std::move(config)), pool_(config_.n_blocks) {
  DI_ICHECK(config_.block_size > 0);
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
  BlockHash parent;
  for (int64_t b = 0; b < max_blocks; ++b) {
    const BlockHash h = hash_block(b == 0 ? nullptr : &parent, tokens.subspan(b * bs, bs), extras);
    auto id = pool_.find_cached(h);
    if (!id) break;
    hit.blocks.push_back(*id);
    parent = h;
  }
  hit.n_tokens = static_cast<int64_t>(hit.blocks.size()) * bs;
  prefix_hits_ += hit.n_tokens;
  return hit;
}

bool KvCacheManager::allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit) {
  auto it = requests_.find(id);
  const bool is_new = it == requests_.end();
  const int32_t n_have = is_new ? 0 : static_cast<int32_t>(it->second.blocks.size());
  const int32_t n_from_hit = is_new && hit ? static_cast<int32_t>(hit->blocks.size()) : 0;
  const int32_t n_need = std::max(0, n_blocks_for(n_total_tokens) - n_have - n_from_hit);
  // Revived hit blocks leave the free queue too, so they count against what is free.
  int32_t n_hit_free = 0;
  for (int32_t i = 0; i < n_from_hit; ++i) n_hit_free += pool_.ref_count(hit->blocks[static_cast<size_t>(i)]) == 0;
  if (n_need + n_hit_free > pool_.n_free()) return false;

  RequestBlocks& req = is_new ? requests_[id] : it->second;
  for (int32_t i = 0; i < n_from_hit; ++i) {
    pool_.acquire(hit->blocks[static_cast<size_t>(i)]);
    req.blocks.push_back(hit->blocks[static_cast<size_t>(i)]);
  }
  const bool ok = pool_.allocate(n_need, req.blocks);
  DI_ICHECK(ok);
  return true;
}

void KvCacheManager::cache_full_blocks(RequestId id, std::span<const int32_t> tokens, int64_t n_computed,
                                       std::string_view cache_salt) {
  if (!config_.enable_prefix_caching) return;
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& req = it->second;
  const int64_t bs = config_.block_size;
  const int64_t n_full = std::min<int64_t>(n_computed / bs, static_cast<int64_t>(req.blocks.size()));
  if (static_cast<int64_t>(req.hashes.size()) >= n_full) return;
  const std::string extras = extras_for(cache_salt);
  for (int64_t b = static_cast<int64_t>(req.hashes.size()); b < n_full; ++b) {
    const BlockHash h = hash_block(b == 0 ? nullptr : &req.hashes[static_cast<size_t>(b - 1)],
                                   tokens.subspan(b * bs, bs), extras);
    pool_.cache(req.blocks[static_cast<size_t>(b)], h);
    req.hashes.push_back(h);
  }
}

void KvCacheManager::free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.release(*b);
  requests_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.blocks;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.pool = pool_.stats();
  s.usage = s.pool.n_blocks == 0 ? 0.0 : 1.0 - static_cast<double>(s.pool.n_free) / static_cast<double>(s.pool.n_blocks);
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  return s;
}

}  // namespace deepinfer::kv
