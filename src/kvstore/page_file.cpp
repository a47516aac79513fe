#include "kvstore/page_file.h"

#include <xxhash.h>

#include <cstring>

namespace deepinfer::kvstore {

namespace {

constexpr char kMagic[8] = {'D', 'I', 'K', 'V', 'P', 'A', 'G', 'E'};

template <typename T>
void put_le(uint8_t* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T get_le(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

std::vector<uint8_t> encode_page_header(const PageKey& key, const PageMeta& meta, size_t payload_bytes) {
  const size_t n = kPageFixedHeaderBytes + meta.fingerprint.size() + meta.layout.size();
  std::vector<uint8_t> h(n);
  uint8_t* p = h.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  put_le<uint32_t>(p + 8, kPageFormatVersion);
  put_le<uint32_t>(p + 12, static_cast<uint32_t>(n));
  std::memcpy(p + 16, key.bytes.data(), key.bytes.size());
  put_le<uint64_t>(p + 48, static_cast<uint64_t>(meta.n_tokens));
  put_le<uint64_t>(p + 56, payload_bytes);
  put_le<uint32_t>(p + 64, static_cast<uint32_t>(meta.fingerprint.size()));
  put_le<uint32_t>(p + 68, static_cast<uint32_t>(meta.layout.size()));
  std::memcpy(p + kPageFixedHeaderBytes, meta.fingerprint.data(), meta.fingerprint.size());
  std::memcpy(p + kPageFixedHeaderBytes + meta.fingerprint.size(), meta.layout.data(), meta.layout.size());
  return h;
}

uint64_t page_checksum(std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, header.data(), header.size());
  XXH3_64bits_update(state, payload.data(), payload.size());
  const uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return sum;
}

std::vector<uint8_t> encode_page(const PageKey& key, const PageMeta& meta, std::span<const uint8_t> payload) {
  const std::vector<uint8_t> header = encode_page_header(key, meta, payload.size());
  std::vector<uint8_t> out(header.size() + payload.size() + kPageTrailerBytes);
  std::memcpy(out.data(), header.data(), header.size());
  if (!payload.empty()) std::memcpy(out.data() + header.size(), payload.data(), payload.size());
  put_le<uint64_t>(out.data() + header.size() + payload.size(), page_checksum(header, payload));
  return out;
}

Result<DecodedPage> decode_page_header(std::span<const uint8_t> head, uint64_t file_bytes) {
  if (head.size() < kPageFixedHeaderBytes) return data_loss("page file shorter than its header");
  const uint8_t* p = head.data();
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) return data_loss("not a page file (bad magic)");
  const auto version = get_le<uint32_t>(p + 8);
  if (version != kPageFormatVersion) {
    return data_loss("page format version " + std::to_string(version) + ", this build reads " +
                     std::to_string(kPageFormatVersion));
  }
  const auto header_bytes = get_le<uint32_t>(p + 12);
  DecodedPage d;
  std::memcpy(d.key.bytes.data(), p + 16, d.key.bytes.size());
  d.meta.n_tokens = static_cast<int64_t>(get_le<uint64_t>(p + 48));
  const auto payload_bytes = get_le<uint64_t>(p + 56);
  const auto n_fingerprint = get_le<uint32_t>(p + 64);
  const auto n_layout = get_le<uint32_t>(p + 68);
  if (uint64_t{header_bytes} != kPageFixedHeaderBytes + uint64_t{n_fingerprint} + n_layout) {
    return data_loss("page header sizes disagree");
  }
  // Subtraction, not a sum that could wrap: the payload must be what is left of the file.
  if (file_bytes < uint64_t{header_bytes} + kPageTrailerBytes ||
      payload_bytes != file_bytes - header_bytes - kPageTrailerBytes) {
    return data_loss("page file is " + std::to_string(file_bytes) + " bytes, its header says " +
                     std::to_string(uint64_t{header_bytes} + payload_bytes + kPageTrailerBytes));
  }
  if (head.size() < header_bytes) return data_loss("page file shorter than its header");
  d.meta.fingerprint.assign(reinterpret_cast<const char*>(p + kPageFixedHeaderBytes), n_fingerprint);
  d.meta.layout.assign(reinterpret_cast<const char*>(p + kPageFixedHeaderBytes + n_fingerprint), n_layout);
  d.payload_offset = header_bytes;
  d.payload_bytes = payload_bytes;
  return d;
}

Result<DecodedPage> decode_page(std::span<const uint8_t> file) {
  DI_ASSIGN_OR_RETURN(DecodedPage d, decode_page_header(file, file.size()));
  const uint64_t stored = get_le<uint64_t>(file.data() + file.size() - kPageTrailerBytes);
  if (page_checksum(file.first(d.payload_offset), file.subspan(d.payload_offset, d.payload_bytes)) != stored) {
    return data_loss("page checksum mismatch");
  }
  return d;
}

std::string key_hex(const PageKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : key.bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Result<PageKey> key_from_hex(std::string_view hex) {
  if (hex.size() != 64) return invalid_argument("a page key is 64 hex digits");
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  PageKey key;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("a page key is 64 lowercase hex digits");
    key.bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return key;
}

}  // namespace deepinfer::kvstore
