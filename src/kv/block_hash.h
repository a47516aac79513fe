// Chained block hashes for prefix caching.
//
// A full block's key is SHA-256(parent key, the block's token ids, extras). The parent key makes
// a block's identity depend on the whole prefix before it, so equal keys mean equal prefixes.
// Extras carry what else changes the KV contents or must isolate users: the model fingerprint
// and a per-request cache salt. SHA-256 rather than a fast non-cryptographic hash because a
// collision would silently serve another prefix's KV (and, with salts, another user's): the
// cost is ~0.3 us per 16-token block, nothing next to computing the block.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string_view>

namespace deepinfer::kv {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.bytes.data(), sizeof(v));  // already uniformly distributed
    return v;
  }
};

// The key of the block after `parent` (nullptr for the first block of a sequence).
// `extras` is hashed length-prefixed, so ("ab", "") and ("a", "b") cannot collide.
BlockHash hash_block(const BlockHash* parent, std::span<const int32_t> tokens, std::string_view extras);

}  // namespace deepinfer::kv
