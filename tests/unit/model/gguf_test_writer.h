// A small GGUF writer for tests and the fuzzer's seed corpus. It writes exactly what it is
// told, including things a valid writer never would (5 dimensions, an unknown type id, a
// count that does not match), so tests can build damaged files field by field.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::testing {

// GGUF value type ids (metadata.h's MetaType).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// An encoded value without its type tag (the tag is written by the key/value or the array).
struct GgufValue {
  uint32_t type = 0;
  std::vector<uint8_t> payload;
};

template <typename T>
void append_le(std::vector<uint8_t>& out, T v) {
  // resize + memcpy, not insert from a local array: GCC 12 warns falsely (-Wstringop-overflow)
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

inline void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append_le<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
GgufValue gguf_scalar(GgufType type, T v) {
  GgufValue out{static_cast<uint32_t>(type), {}};
  append_le(out.payload, v);
  return out;
}
inline GgufValue gguf_u8(uint8_t v) { return gguf_scalar(GgufType::kU8, v); }
inline GgufValue gguf_i8(int8_t v) { return gguf_scalar(GgufType::kI8, v); }
inline GgufValue gguf_u16(uint16_t v) { return gguf_scalar(GgufType::kU16, v); }
inline GgufValue gguf_i16(int16_t v) { return gguf_scalar(GgufType::kI16, v); }
inline GgufValue gguf_u32(uint32_t v) { return gguf_scalar(GgufType::kU32, v); }
inline GgufValue gguf_i32(int32_t v) { return gguf_scalar(GgufType::kI32, v); }
inline GgufValue gguf_u64(uint64_t v) { return gguf_scalar(GgufType::kU64, v); }
inline GgufValue gguf_i64(int64_t v) { return gguf_scalar(GgufType::kI64, v); }
inline GgufValue gguf_f32(float v) { return gguf_scalar(GgufType::kF32, v); }
inline GgufValue gguf_f64(double v) { return gguf_scalar(GgufType::kF64, v); }
inline GgufValue gguf_bool(bool v) { return gguf_scalar(GgufType::kBool, static_cast<uint8_t>(v)); }
inline GgufValue gguf_string(const std::string& s) {
  GgufValue out{static_cast<uint32_t>(GgufType::kString), {}};
  append_string(out.payload, s);
  return out;
}
// Items must all be of element_type (not checked: tests may want a lie). `count` overrides
// the written count.
inline GgufValue gguf_array(uint32_t element_type, const std::vector<GgufValue>& items,
                            std::optional<uint64_t> count = std::nullopt) {
  GgufValue out{static_cast<uint32_t>(GgufType::kArray), {}};
  append_le<uint32_t>(out.payload, element_type);
  append_le<uint64_t>(out.payload, count.value_or(items.size()));
  for (const GgufValue& item : items) out.payload.insert(out.payload.end(), item.payload.begin(), item.payload.end());
  return out;
}
inline GgufValue gguf_array(GgufType element_type, const std::vector<GgufValue>& items) {
  return gguf_array(static_cast<uint32_t>(element_type), items);
}

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first, as GGUF stores them; n_dims = dims.size()
  uint32_t type_id = 0;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // relative to the data section; default: packed and aligned
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  GgufWriter& kv(const std::string& key, GgufValue value) {
    kvs_.emplace_back(key, std::move(value));
    return *this;
  }
  // Writes general.alignment (uint32) and pads with it.
  GgufWriter& alignment(uint32_t a) {
    alignment_ = a;
    return kv("general.alignment", gguf_u32(a));
  }
  GgufWriter& tensor(GgufTensorSpec spec) {
    tensors_.push_back(std::move(spec));
    return *this;
  }
  GgufWriter& n_tensors_override(uint64_t n) {
    n_tensors_override_ = n;
    return *this;
  }
  GgufWriter& n_kv_override(uint64_t n) {
    n_kv_override_ = n;
    return *this;
  }

  // Where the last bytes() put things.
  uint64_t infos_offset() const { return infos_offset_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<uint64_t>& tensor_offsets() const { return offsets_; }

  std::vector<uint8_t> bytes() {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    append_le<uint32_t>(out, version_);
    append_le<uint64_t>(out, n_tensors_override_.value_or(tensors_.size()));
    append_le<uint64_t>(out, n_kv_override_.value_or(kvs_.size()));
    for (const auto& [key, value] : kvs_) {
      append_string(out, key);
      append_le<uint32_t>(out, value.type);
      out.insert(out.end(), value.payload.begin(), value.payload.end());
    }
    infos_offset_ = out.size();
    offsets_.clear();
    uint64_t next = 0;
    for (const GgufTensorSpec& t : tensors_) {
      const uint64_t offset = t.offset.value_or(next);
      offsets_.push_back(offset);
      if (offset <= (uint64_t{1} << 30)) next = align(offset + t.data.size());
      append_string(out, t.name);
      append_le<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) append_le<uint64_t>(out, d);
      append_le<uint32_t>(out, t.type_id);
      append_le<uint64_t>(out, offset);
    }
    data_offset_ = align(out.size());
    out.resize(data_offset_, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      // An offset far past any real file (a test of offsets past the end) places no data.
      if (offsets_[i] > (uint64_t{1} << 30) || tensors_[i].data.empty()) continue;
      const uint64_t at = data_offset_ + offsets_[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size(), 0);
      std::memcpy(out.data() + at, tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out;
  }

 private:
  uint64_t align(uint64_t x) const { return alignment_ == 0 ? x : (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<GgufTensorSpec> tensors_;
  std::optional<uint64_t> n_tensors_override_;
  std::optional<uint64_t> n_kv_override_;
  uint64_t infos_offset_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<uint64_t> offsets_;
};

// Bytes of n float32 values 0, 1, 2, ... (easy to recognise when read back).
inline std::vector<uint8_t> ramp_f32(size_t n) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; ++i) append_le<float>(out, static_cast<float>(i));
  return out;
}

// A small valid file with metadata of every type (nested arrays too) and tensors of several
// types, sizes and alignments. The last tensor's size is a multiple of 32, so the file ends
// exactly where its data does and every shorter prefix is damaged.
inline GgufWriter sample_gguf_writer() {
  GgufWriter w;
  w.kv("general.architecture", gguf_string("llama"))
      .kv("general.name", gguf_string("tiny \xce\xbb"))
      .kv("test.u8", gguf_u8(200))
      .kv("test.i8", gguf_i8(-100))
      .kv("test.u16", gguf_u16(60000))
      .kv("test.i16", gguf_i16(-30000))
      .kv("test.u32", gguf_u32(4000000000u))
      .kv("test.i32", gguf_i32(-2000000000))
      .kv("test.u64", gguf_u64(18000000000000000000ull))
      .kv("test.i64", gguf_i64(-9000000000000000000ll))
      .kv("test.f32", gguf_f32(1.5f))
      .kv("test.f64", gguf_f64(-2.25))
      .kv("test.bool", gguf_bool(true))
      .kv("test.empty_string", gguf_string(""))
      .kv("test.string_with_nul", gguf_string(std::string("a\0b", 3)))
      .kv("test.strings", gguf_array(GgufType::kString, {gguf_string("x"), gguf_string(""), gguf_string("yz")}))
      .kv("test.floats", gguf_array(GgufType::kF32, {gguf_f32(0.5f), gguf_f32(-1.0f)}))
      .kv("test.empty_array", gguf_array(GgufType::kI32, {}))
      .kv("test.nested",
          gguf_array(GgufType::kArray, {gguf_array(GgufType::kI16, {gguf_i16(1), gguf_i16(-2)}),
                                        gguf_array(GgufType::kString, {gguf_string("deep")}),
                                        gguf_array(GgufType::kArray, {gguf_array(GgufType::kU8, {gguf_u8(7)})})}))
      .kv("llama.block_count", gguf_u32(2));
  // f32 [2, 3] (dims innermost first: 3, 2); q4_0 [2, 64]; a 1-d f32 of 8 (32 bytes).
  w.tensor({"blk.0.attn_norm.weight", {3, 2}, 0, ramp_f32(6), std::nullopt});
  std::vector<uint8_t> q4(2 * 2 * 18);
  for (size_t i = 0; i < q4.size(); ++i) q4[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t b = 0; b < 4; ++b) {  // half-float scale 0.5 in each block
    q4[b * 18] = 0x00;
    q4[b * 18 + 1] = 0x38;
  }
  w.tensor({"blk.0.attn_q.weight", {64, 2}, 2, q4, std::nullopt});
  w.tensor({"output_norm.weight", {8}, 0, ramp_f32(8), std::nullopt});
  return w;
}

}  // namespace deepinfer::testing
