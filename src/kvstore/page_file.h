// The bytes of one page file: what a page is on disk and how a reader decides to trust it.
//
//   offset  size  field
//   0       8     magic "DIKVPAGE"
//   8       4     format version (kPageFormatVersion), little-endian like every integer here
//   12      4     header bytes (everything before the payload)
//   16      32    key: the prefix chain hash of src/kv (block_hash.h) at the page's last block
//   48      8     tokens the page covers
//   56      8     payload bytes
//   64      4     fingerprint bytes F
//   68      4     layout bytes L
//   72      F     model fingerprint (weights, KV element type, backend layout)
//   72+F    L     KV layout: the stored groups' shapes (see PageMeta::layout)
//   ...           payload: the KV of the page's tokens, as the engine laid it out
//   end-8   8     XXH3-64 of every byte before it
//
// The checksum is a trailer, so a file cut short anywhere (a crashed writer that was not
// atomic, a torn copy) fails it; the header names what the payload is, so a page is refused
// when any of it differs from what the reader expects, even with a matching key. XXH3 rather
// than SHA-256: the key already is a cryptographic hash of the prefix; the checksum guards
// against torn and flipped bytes, not adversaries, and must not cost more than the disk.
// Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "kv/block_hash.h"

namespace deepinfer::kvstore {

using PageKey = kv::BlockHash;

inline constexpr uint32_t kPageFormatVersion = 1;
inline constexpr size_t kPageFixedHeaderBytes = 72;
inline constexpr size_t kPageTrailerBytes = 8;

// What a page holds besides its payload; a reader passes the values it expects.
struct PageMeta {
  std::string fingerprint;  // the model fingerprint (KvCacheConfig::model_fingerprint)
  std::string layout;       // the stored groups' shapes and element type, as the engine writes it
  int64_t n_tokens = 0;
  bool operator==(const PageMeta&) const = default;
};

// The header of a page of `payload_bytes` bytes.
std::vector<uint8_t> encode_page_header(const PageKey& key, const PageMeta& meta, size_t payload_bytes);
// The checksum trailer over the header and the payload.
uint64_t page_checksum(std::span<const uint8_t> header, std::span<const uint8_t> payload);
std::vector<uint8_t> encode_page(const PageKey& key, const PageMeta& meta, std::span<const uint8_t> payload);

struct DecodedPage {
  PageKey key;
  PageMeta meta;
  size_t payload_offset = 0;
  size_t payload_bytes = 0;
};

// Parses and verifies a whole page file: DATA_LOSS (truncated, bad magic or version, sizes that
// disagree with the file's, checksum) naming what failed.
Result<DecodedPage> decode_page(std::span<const uint8_t> file);
// The header alone (for listing a store without reading payloads): DATA_LOSS as above, except
// that the checksum is not verified. `file_bytes` is the file's size.
Result<DecodedPage> decode_page_header(std::span<const uint8_t> head, uint64_t file_bytes);

std::string key_hex(const PageKey& key);
// INVALID_ARGUMENT unless 64 hex digits.
Result<PageKey> key_from_hex(std::string_view hex);

}  // namespace deepinfer::kvstore
