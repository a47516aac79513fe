#include "model/loader/metadata.h"

#include <limits>

namespace deepinfer {

std::string_view meta_type_name(MetaType type) {
  switch (type) {
    case MetaType::kU8: return "uint8";
    case MetaType::kI8: return "int8";
    case MetaType::kU16: return "uint16";
    case MetaType::kI16: return "int16";
    case MetaType::kU32: return "uint32";
    case MetaType::kI32: return "int32";
    case MetaType::kF32: return "float32";
    case MetaType::kBool: return "bool";
    case MetaType::kString: return "string";
    case MetaType::kArray: return "array";
    case MetaType::kU64: return "uint64";
    case MetaType::kI64: return "int64";
    case MetaType::kF64: return "float64";
  }
  return "unknown";
}

namespace {

Status missing(std::string_view key) { return not_found("metadata key '" + std::string(key) + "' is missing"); }
Status wrong_type(std::string_view key, const MetaValue& v, std::string_view want) {
  return invalid_argument("metadata key '" + std::string(key) + "' is " +
                          std::string(meta_type_name(v.type)) + ", expected " + std::string(want));
}

bool as_int(const MetaValue& v, int64_t* out) {
  if (auto* u = std::get_if<uint64_t>(&v.value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (auto* i = std::get_if<int64_t>(&v.value)) {
    *out = *i;
    return true;
  }
  return false;
}

bool as_float(const MetaValue& v, double* out) {
  if (auto* d = std::get_if<double>(&v.value)) {
    *out = *d;
    return true;
  }
  int64_t i;
  if (as_int(v, &i)) {
    *out = static_cast<double>(i);
    return true;
  }
  return false;
}

}  // namespace

const MetaValue* Metadata::find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

Result<int64_t> Metadata::get_int(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return missing(key);
  int64_t out;
  if (!as_int(*v, &out)) return wrong_type(key, *v, "an integer");
  return out;
}

Result<uint64_t> Metadata::get_uint(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return missing(key);
  if (auto* u = std::get_if<uint64_t>(&v->value)) return *u;
  int64_t i;
  if (!as_int(*v, &i) || i < 0) return wrong_type(key, *v, "a non-negative integer");
  return static_cast<uint64_t>(i);
}

Result<double> Metadata::get_float(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return missing(key);
  double out;
  if (!as_float(*v, &out)) return wrong_type(key, *v, "a number");
  return out;
}

Result<bool> Metadata::get_bool(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return missing(key);
  if (auto* b = std::get_if<bool>(&v->value)) return *b;
  return wrong_type(key, *v, "bool");
}

Result<std::string> Metadata::get_string(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return missing(key);
  if (auto* s = std::get_if<std::string>(&v->value)) return *s;
  return wrong_type(key, *v, "string");
}

namespace {
Result<const MetaArray*> get_array(const Metadata& m, std::string_view key) {
  const MetaValue* v = m.find(key);
  if (!v) return missing(key);
  auto* a = std::get_if<std::shared_ptr<MetaArray>>(&v->value);
  if (!a || !*a) return wrong_type(key, *v, "array");
  return a->get();
}
}  // namespace

Result<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  DI_ASSIGN_OR_RETURN(const MetaArray* a, get_array(*this, key));
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const MetaValue& item : a->items) {
    auto* s = std::get_if<std::string>(&item.value);
    if (!s) return wrong_type(key, item, "array of strings");
    out.push_back(*s);
  }
  return out;
}

Result<std::vector<double>> Metadata::get_float_array(std::string_view key) const {
  DI_ASSIGN_OR_RETURN(const MetaArray* a, get_array(*this, key));
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const MetaValue& item : a->items) {
    double d;
    if (!as_float(item, &d)) return wrong_type(key, item, "array of numbers");
    out.push_back(d);
  }
  return out;
}

Result<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  DI_ASSIGN_OR_RETURN(const MetaArray* a, get_array(*this, key));
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (const MetaValue& item : a->items) {
    int64_t i;
    if (!as_int(item, &i)) return wrong_type(key, item, "array of integers");
    out.push_back(i);
  }
  return out;
}

Result<uint64_t> Metadata::get_uint_or(std::string_view key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : Result<uint64_t>(fallback);
}
Result<double> Metadata::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> Metadata::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : Result<bool>(fallback);
}
Result<std::string> Metadata::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : Result<std::string>(std::move(fallback));
}

}  // namespace deepinfer
