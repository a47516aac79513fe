#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/check.h"

namespace deepinfer::kv {

KvCacheConfig single_group_config(int64_t block_size, int64_t n_blocks, std::string model_fingerprint,
                                  bool enable_prefix_caching) {
  KvGroupSpec g;
  g.name = "full";
  g.kind = KvGroupKind::kFull;
  g.block_size = block_size;
  g.n_blocks = n_blocks;
  return KvCacheConfig{{std::move(g)}, enable_prefix_caching, std::move(model_fingerprint)};
}

Status KvCacheManager::validate(const KvCacheConfig& config) {
  if (config.groups.empty()) return invalid_argument("the KV cache needs at least one group");
  int64_t base = config.groups[0].block_size;
  for (const KvGroupSpec& g : config.groups) base = std::min(base, g.block_size);
  if (base < 1) return invalid_argument("KV block sizes must be at least 1");
  for (const KvGroupSpec& g : config.groups) {
    if (g.block_size % base != 0) {
      return invalid_argument("KV group '" + g.name + "' has blocks of " + std::to_string(g.block_size) +
                              " tokens, not a multiple of the smallest group's " + std::to_string(base));
    }
    if (g.windowed() && g.window < 1) {
      return invalid_argument("KV group '" + g.name + "' is a " + std::string(kv_group_kind_name(g.kind)) +
                              " group without a window");
    }
    if (g.n_blocks < 0 || g.n_blocks > INT32_MAX) {
      return invalid_argument("KV group '" + g.name + "' has " + std::to_string(g.n_blocks) + " blocks");
    }
  }
  return {};
}

KvCacheManager::KvCacheManager(KvCacheConfig config) : config_(std::move(config)) {
  const Status valid = validate(config_);
  if (!valid.ok()) std::fprintf(stderr, "deepinfer: %s\n", valid.message().c_str());
  DI_ICHECK(valid.ok());
  base_block_ = config_.groups[0].block_size;
  alignment_ = 1;
  for (const KvGroupSpec& g : config_.groups) {
    base_block_ = std::min(base_block_, g.block_size);
    alignment_ = std::lcm(alignment_, g.block_size);
    // A replay after a hit must rebuild every windowed group: a compressor's frontier too.
    if (g.windowed()) max_window_ = std::max(max_window_, g.window);
    groups_.emplace_back(static_cast<int32_t>(g.n_blocks));
  }
}

int64_t KvCacheManager::n_blocks_for(int g, int64_t n_tokens) const {
  const int64_t bs = group(g).block_size;
  return (n_tokens + bs - 1) / bs;
}

std::string KvCacheManager::extras_for(std::string_view cache_salt) const {
  std::string extras = config_.model_fingerprint;
  extras.push_back('\0');
  extras.append(cache_salt);
  return extras;
}

void KvCacheManager::extend_chain(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int64_t n_base,
                                  const std::string& extras) const {
  for (auto b = static_cast<int64_t>(hashes.size()); b < n_base; ++b) {
    hashes.push_back(hash_block(b == 0 ? nullptr : &hashes.back(), tokens.subspan(b * base_block_, base_block_), extras));
  }
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  PrefixHit hit = peek_cached_prefix(tokens, cache_salt);
  prefix_queries_ += static_cast<int64_t>(tokens.size());
  prefix_hits_ += hit.n_tokens;
  return hit;
}

PrefixHit KvCacheManager::peek_cached_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) const {
  PrefixHit hit;
  hit.blocks.resize(groups_.size());
  if (!config_.enable_prefix_caching || tokens.empty()) return hit;
  const std::string extras = extras_for(cache_salt);
  const int64_t n_base = static_cast<int64_t>(tokens.size() - 1) / base_block_;
  std::vector<BlockHash> chain;
  int64_t n_hit = -1;  // the shortest prefix-cached group's hit
  int64_t cached_alignment = 1;
  for (int g = 0; g < n_groups(); ++g) {
    if (!group(g).prefix_cached()) continue;
    const int64_t k = base_blocks_per_block(g);
    cached_alignment = std::lcm(cached_alignment, group(g).block_size);
    std::vector<BlockId>& blocks = hit.blocks[static_cast<size_t>(g)];
    // Stops at the first miss, and (with several groups) where a shorter group already did.
    for (int64_t j = 0; (j + 1) * k <= n_base && (n_hit < 0 || j * group(g).block_size < n_hit); ++j) {
      extend_chain(chain, tokens, (j + 1) * k, extras);
      auto id = groups_[static_cast<size_t>(g)].find_cached(chain[static_cast<size_t>((j + 1) * k - 1)]);
      if (!id) break;
      blocks.push_back(*id);
    }
    const int64_t tokens_found = static_cast<int64_t>(blocks.size()) * group(g).block_size;
    n_hit = n_hit < 0 ? tokens_found : std::min(n_hit, tokens_found);
  }
  hit.n_tokens = n_hit < 0 ? 0 : n_hit / cached_alignment * cached_alignment;
  for (int g = 0; g < n_groups(); ++g) {
    if (group(g).prefix_cached()) hit.blocks[static_cast<size_t>(g)].resize(static_cast<size_t>(hit.n_tokens / group(g).block_size));
  }
  return hit;
}

std::vector<BlockHash> KvCacheManager::prefix_keys(std::span<const int32_t> tokens, std::string_view cache_salt,
                                                   int64_t n_base) const {
  DI_ICHECK(n_base * base_block_ <= static_cast<int64_t>(tokens.size()));
  std::vector<BlockHash> chain;
  extend_chain(chain, tokens, n_base, extras_for(cache_salt));
  return chain;
}

std::span<const BlockHash> KvCacheManager::published_keys(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.hashes;
}

int64_t KvCacheManager::import_prefix(std::span<const int32_t> tokens, std::string_view cache_salt, int64_t n_from,
                                      int64_t n_to, const BlockFill& fill) {
  if (!config_.enable_prefix_caching || n_to <= n_from) return n_from;
  const std::vector<BlockHash> chain = prefix_keys(tokens, cache_salt, n_to / base_block_);
  std::vector<std::vector<BlockId>> held(groups_.size()), fresh(groups_.size());
  const auto give_back = [&] {
    for (size_t g = 0; g < groups_.size(); ++g) {
      // Tail first, the new blocks before the held ones: the LRU queue evicts a chain's end first.
      for (auto b = fresh[g].rbegin(); b != fresh[g].rend(); ++b) groups_[g].release(*b);
      for (auto b = held[g].rbegin(); b != held[g].rend(); ++b) groups_[g].release(*b);
    }
  };
  bool ok = true;
  for (int g = 0; g < n_groups() && ok; ++g) {
    if (!group(g).prefix_cached()) continue;
    const auto gi = static_cast<size_t>(g);
    const int64_t bs = group(g).block_size, k = base_blocks_per_block(g);
    DI_ICHECK(n_from % bs == 0 && n_to % bs == 0);
    for (int64_t j = 0; j < n_from / bs && ok; ++j) {
      auto id = groups_[gi].find_cached(chain[static_cast<size_t>((j + 1) * k - 1)]);
      ok = id.has_value();
      if (ok) {
        groups_[gi].acquire(*id);
        held[gi].push_back(*id);
      }
    }
    ok = ok && groups_[gi].allocate(static_cast<int32_t>((n_to - n_from) / bs), fresh[gi]);
  }
  for (int g = 0; g < n_groups() && ok; ++g) {
    const auto gi = static_cast<size_t>(g);
    for (size_t i = 0; i < fresh[gi].size() && ok; ++i) {
      ok = fill(g, n_from / group(g).block_size + static_cast<int64_t>(i), fresh[gi][i]);
    }
  }
  if (ok) {
    for (int g = 0; g < n_groups(); ++g) {
      const auto gi = static_cast<size_t>(g);
      const int64_t bs = group(g).block_size, k = base_blocks_per_block(g);
      for (size_t i = 0; i < fresh[gi].size(); ++i) {
        const int64_t j = n_from / bs + static_cast<int64_t>(i);
        groups_[gi].cache(fresh[gi][i], chain[static_cast<size_t>((j + 1) * k - 1)]);
      }
    }
  }
  give_back();
  return ok ? n_to : n_from;
}

bool KvCacheManager::allocate_slots(RequestId id, int64_t n_total_tokens, const PrefixHit* hit, int64_t n_computed) {
  auto it = requests_.find(id);
  const bool is_new = it == requests_.end();
  DI_ICHECK(n_computed % alignment_ == 0);
  // Per group: blocks from the hit (prefix-cached groups of a new request), blocks skipped
  // below where computing starts (sliding groups of a new request), fresh blocks.
  std::vector<int64_t> n_from_hit(groups_.size()), n_skip(groups_.size()), n_need(groups_.size());
  for (int g = 0; g < n_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    BlockPool& pool = groups_[gi];
    const int64_t n_have = is_new ? 0 : static_cast<int64_t>(it->second.tables[gi].size());
    int64_t n_hit_free = 0;
    if (is_new && hit && gi < hit->blocks.size() && group(g).prefix_cached()) {
      n_from_hit[gi] = static_cast<int64_t>(hit->blocks[gi].size());
      // Revived hit blocks leave the free queue too, so they count against what is free.
      for (BlockId b : hit->blocks[gi]) n_hit_free += pool.ref_count(b) == 0;
    }
    if (is_new && group(g).windowed()) n_skip[gi] = n_computed / group(g).block_size;
    n_need[gi] = std::max<int64_t>(0, n_blocks_for(g, n_total_tokens) - n_have - n_from_hit[gi] - n_skip[gi]);
    if (n_need[gi] + n_hit_free > pool.n_free()) return false;
  }
  RequestBlocks& req = is_new ? requests_[id] : it->second;
  if (is_new) {
    req.tables.resize(groups_.size());
    req.n_dropped.assign(groups_.size(), 0);
    req.n_published.assign(groups_.size(), 0);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<BlockId>& table = req.tables[g];
    for (int64_t i = 0; i < n_from_hit[g]; ++i) {
      groups_[g].acquire(hit->blocks[g][static_cast<size_t>(i)]);
      table.push_back(hit->blocks[g][static_cast<size_t>(i)]);
    }
    if (n_skip[g] > 0) {
      table.assign(static_cast<size_t>(n_skip[g]), kNoBlock);
      req.n_dropped[g] = static_cast<int32_t>(n_skip[g]);
    }
    const bool ok = groups_[g].allocate(static_cast<int32_t>(n_need[g]), table);
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
  std::string extras;
  for (int g = 0; g < n_groups(); ++g) {
    if (!group(g).prefix_cached()) continue;
    const auto gi = static_cast<size_t>(g);
    const std::vector<BlockId>& table = req.tables[gi];
    const int64_t n_full = std::min<int64_t>(n_computed / group(g).block_size, static_cast<int64_t>(table.size()));
    if (req.n_published[gi] >= n_full) continue;
    if (extras.empty()) extras = extras_for(cache_salt);
    const int64_t k = base_blocks_per_block(g);
    extend_chain(req.hashes, tokens, n_full * k, extras);
    for (int64_t j = req.n_published[gi]; j < n_full; ++j) {
      groups_[gi].cache(table[static_cast<size_t>(j)], req.hashes[static_cast<size_t>((j + 1) * k - 1)]);
    }
    req.n_published[gi] = n_full;
  }
}

int64_t KvCacheManager::blocks_below(RequestId id, int g, int64_t n_tokens) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  const auto gi = static_cast<size_t>(g);
  const std::vector<BlockId>& table = it->second.tables[gi];
  // Entries below n_dropped are all released: a long context's sliding table is mostly those.
  const auto n = std::min<size_t>(table.size(), static_cast<size_t>(n_blocks_for(g, n_tokens)));
  const auto from = std::min<size_t>(n, static_cast<size_t>(it->second.n_dropped[gi]));
  return std::count_if(table.begin() + static_cast<std::ptrdiff_t>(from), table.begin() + static_cast<std::ptrdiff_t>(n),
                       [](BlockId b) { return b != kNoBlock; });
}

void KvCacheManager::free_out_of_window(RequestId id, int64_t n_computed) {
  if (!has_window_groups()) return;
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& req = it->second;
  for (int g = 0; g < n_groups(); ++g) {
    if (!group(g).windowed()) continue;
    const auto gi = static_cast<size_t>(g);
    std::vector<BlockId>& table = req.tables[gi];
    // The next query sits at n_computed and sees from n_computed - window + 1 on; block b ends
    // at (b + 1) * block_size - 1.
    const int64_t first_visible = n_computed - group(g).window + 1;
    const int64_t n_dead =
        std::clamp<int64_t>(first_visible / group(g).block_size, 0, static_cast<int64_t>(table.size()));
    for (int64_t b = req.n_dropped[gi]; b < n_dead; ++b) {
      BlockId& block = table[static_cast<size_t>(b)];
      if (block != kNoBlock) groups_[gi].release(block);
      block = kNoBlock;
    }
    req.n_dropped[gi] = std::max<int32_t>(req.n_dropped[gi], static_cast<int32_t>(n_dead));
  }
}

void KvCacheManager::free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& blocks = it->second.tables[g];
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (*b != kNoBlock) groups_[g].release(*b);
    }
  }
  requests_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId id, int g) const {
  DI_ICHECK(g >= 0 && g < n_groups());
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.tables[static_cast<size_t>(g)];
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  for (int g = 0; g < n_groups(); ++g) {
    const BlockPoolStats p = groups_[static_cast<size_t>(g)].stats();
    s.pool.n_blocks += p.n_blocks;
    s.pool.n_free += p.n_free;
    s.pool.n_cached += p.n_cached;
    s.pool.n_evicted += p.n_evicted;
    s.groups.push_back({group(g).name, group(g).kind, p.n_blocks, p.n_blocks - p.n_free, p.n_cached, p.n_evicted});
  }
  s.usage = s.pool.n_blocks == 0 ? 0.0 : 1.0 - static_cast<double>(s.pool.n_free) / static_cast<double>(s.pool.n_blocks);
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  return s;
}

}  // namespace deepinfer::kv
