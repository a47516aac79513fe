// Model metadata as typed key/value pairs, with GGUF's key names and value types.
//
// A GGUF file's metadata is read into this as it is. A Hugging Face directory's config.json is
// translated into the same keys ("llama.embedding_length", "general.architecture", ...) by the
// safetensors loader, so architecture code reads one vocabulary whatever the file format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// GGUF value type ids (gguf_type).
enum class MetaType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view meta_type_name(MetaType type);

struct MetaValue;
// An array keeps its element type (GGUF arrays are homogeneous; nested arrays are kArray
// elements each with their own type).
struct MetaArray {
  MetaType element_type = MetaType::kU8;
  std::vector<MetaValue> items;
};

struct MetaValue {
  MetaType type = MetaType::kU8;
  // Integers of every width are held as int64/uint64 by signedness; floats as double.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<MetaArray>> value;

  static MetaValue of_uint(uint64_t v, MetaType t = MetaType::kU64) { return {t, v}; }
  static MetaValue of_int(int64_t v, MetaType t = MetaType::kI64) { return {t, v}; }
  static MetaValue of_float(double v, MetaType t = MetaType::kF64) { return {t, v}; }
  static MetaValue of_bool(bool v) { return {MetaType::kBool, v}; }
  static MetaValue of_string(std::string v) { return {MetaType::kString, std::move(v)}; }
  static MetaValue of_array(MetaArray a) {
    return {MetaType::kArray, std::make_shared<MetaArray>(std::move(a))};
  }
};

class Metadata {
 public:
  void set(std::string key, MetaValue value) { values_[std::move(key)] = std::move(value); }
  bool has(std::string_view key) const { return values_.find(key) != values_.end(); }
  const MetaValue* find(std::string_view key) const;
  const std::map<std::string, MetaValue, std::less<>>& all() const { return values_; }

  // Typed getters. Any integer type converts to the requested one when it fits; floats accept
  // integers. Errors: NOT_FOUND (missing key) or INVALID_ARGUMENT (wrong type), naming the key.
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // Same, with a default for a missing key (a present key of the wrong type is still an error).
  Result<uint64_t> get_uint_or(std::string_view key, uint64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;

 private:
  std::map<std::string, MetaValue, std::less<>> values_;
};

}  // namespace deepinfer
