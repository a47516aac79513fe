#include "router/prefix_index.h"

namespace deepinfer::router {

namespace {

// FNV-1a, seeded with the parent's key. Not collision-resistant, and need not be: a collision
// costs one mis-estimated hit, never a wrong answer (the replica checks its own SHA-256 keys).
uint64_t chain(uint64_t parent, std::string_view bytes) {
  uint64_t h = 1469598103934665603ull ^ parent;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::vector<uint64_t> text_block_keys(std::string_view text, size_t block_bytes) {
  std::vector<uint64_t> keys;
  if (block_bytes == 0) return keys;
  keys.reserve(text.size() / block_bytes);
  uint64_t parent = 0;
  for (size_t at = 0; at + block_bytes <= text.size(); at += block_bytes) {
    parent = chain(parent, text.substr(at, block_bytes));
    keys.push_back(parent);
  }
  return keys;
}

size_t PrefixIndex::match(std::span<const uint64_t> keys) const {
  size_t n = 0;
  while (n < keys.size() && blocks_.count(keys[n])) ++n;
  return n;
}

void PrefixIndex::insert(std::span<const uint64_t> keys) {
  // NOTE: touched leaf first, so that the root ends most recent and eviction takes a chain's
  // tail before its head: a head evicted first would orphan every block after it (match stops
  // at the first missing key) while they still took room.
  for (size_t i = keys.size(); i-- > 0;) {
    auto it = blocks_.find(keys[i]);
    if (it != blocks_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
    } else {
      lru_.push_front(keys[i]);
      blocks_.emplace(keys[i], lru_.begin());
    }
  }
  while (blocks_.size() > max_blocks_) {
    blocks_.erase(lru_.back());
    lru_.pop_back();
  }
}

void PrefixIndex::clear() {
  blocks_.clear();
  lru_.clear();
}

}  // namespace deepinfer::router
