// An approximate record of which prompt prefixes each replica has seen, for cache-aware routing.
//
// The router hashes text, not tokens: a prompt's routing key (request_key.h) is cut into blocks
// of kTextBlockBytes bytes and each block's key chains its parent's (hash(parent, bytes)), so
// equal keys mean equal prefixes, as the engine's own block keys do. Text, because the router
// then needs no model: it runs beside any replica mix, starts in milliseconds, and costs no
// tokenizer memory (DeepSeek V4's vocabulary is large); SGLang's HTTP router does the same with
// a character tree. 64 bytes is about 16 tokens of English, one engine KV block, so a match in
// blocks converts to tokens at kBytesPerToken.
//
// The index is approximate by design: it records what was routed, not what the replica kept.
// Its capacity is bounded (LRU), so a replica that evicted a prefix long ago stops attracting
// it; a replica that restarts is cleared by its owner (replica_pool.h).
//
// Threading: none inside; the owner serializes access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::router {

inline constexpr size_t kTextBlockBytes = 64;
inline constexpr double kBytesPerToken = 4.0;

// Chained keys of the full blocks of `text`: keys[i] covers text[0, block_bytes * (i + 1)). A
// tail shorter than a block has no key (a partial block is never shared in the engine either).
std::vector<uint64_t> text_block_keys(std::string_view text, size_t block_bytes = kTextBlockBytes);

class PrefixIndex {
 public:
  explicit PrefixIndex(size_t max_blocks) : max_blocks_(max_blocks) {}

  // How many leading keys of `keys` the index holds (stops at the first one it lacks).
  size_t match(std::span<const uint64_t> keys) const;
  // Records the keys as most recently used, then evicts least recently used keys above the
  // capacity.
  void insert(std::span<const uint64_t> keys);
  void clear();
  size_t size() const { return blocks_.size(); }

 private:
  size_t max_blocks_;
  std::list<uint64_t> lru_;  // front: most recently used
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> blocks_;
};

}  // namespace deepinfer::router
