#include "recipe/request_fields.h"

#include <charconv>
#include <cmath>

namespace deepinfer::recipe {

using Json = nlohmann::ordered_json;

namespace {

// Shortest text that reads back as `v`: "2", "0.5", "1e+308".
std::string number_text(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// Appended piece by piece: "'" + std::string(...) trips GCC 12's -Wrestrict false positive.
std::string quoted(std::string_view path) {
  std::string s;
  s.reserve(path.size() + 2);
  s += '\'';
  s += path;
  s += '\'';
  return s;
}

// OpenAI's wording: "Invalid 'top_k': integer above maximum value. Expected a value <=
// 2147483647, but got 4294967296 instead."
Status out_of_range_error(std::string_view path, const char* kind, bool above, std::string_view bound,
                          std::string_view got, std::string_view range_message) {
  if (!range_message.empty()) return invalid_argument(std::string(range_message));
  std::string m = "Invalid " + quoted(path) + ": " + kind + (above ? " above maximum" : " below minimum") +
                  " value. Expected a value " + std::string(bound) + ", but got " + std::string(got) +
                  " instead.";
  return invalid_argument(std::move(m));
}

// The smallest magnitude a double can have and be beyond every int64: 2^63.
constexpr double kTwoPow63 = 9223372036854775808.0;

}  // namespace

const char* json_type_phrase(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a decimal number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a value of another kind";
  }
}

Status type_error(std::string_view path, std::string_view expected, const Json& got) {
  return invalid_argument("Invalid type for " + quoted(path) + ": expected " + std::string(expected) + ", but got " +
                          json_type_phrase(got) + " instead.");
}

Result<int64_t> integer_value(const Json& value, std::string_view path, int64_t lo, int64_t hi,
                              std::string_view range_message) {
  auto above = [&](std::string got, std::string_view message) {
    return out_of_range_error(path, "integer", true, "<= " + std::to_string(hi), got, message);
  };
  auto below = [&](std::string got, std::string_view message) {
    return out_of_range_error(path, "integer", false, ">= " + std::to_string(lo), got, message);
  };
  if (value.is_number_float()) {
    // An integer literal beyond 64 bits arrives as a double; so does 1e308. Either is out of
    // every range an int64 can express, whatever its spelling. The reference's wording is for
    // integers (its typed deserialization rejects a float before any range check): ours here.
    const double v = value.get<double>();
    if (std::isfinite(v) && std::trunc(v) == v && std::fabs(v) >= kTwoPow63) {
      return v > 0 ? above(number_text(v), {}) : below(number_text(v), {});
    }
    return type_error(path, "an integer", value);
  }
  if (!value.is_number_integer()) return type_error(path, "an integer", value);
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return above(std::to_string(value.get<uint64_t>()), range_message);
  }
  const int64_t v = value.get<int64_t>();
  if (v > hi) return above(std::to_string(v), range_message);
  if (v < lo) return below(std::to_string(v), range_message);
  return v;
}

Result<double> number_value(const Json& value, std::string_view path, NumberRange range,
                            std::string_view range_message) {
  if (!value.is_number()) return type_error(path, "a number", value);
  const double v = value.get<double>();
  const std::string got = value.is_number_float() ? number_text(v) : value.dump();
  if (range.lo_open ? !(v > range.lo) : !(v >= range.lo)) {
    return out_of_range_error(path, "number", false, (range.lo_open ? "> " : ">= ") + number_text(range.lo), got,
                              range_message);
  }
  if (!(v <= range.hi)) {
    return out_of_range_error(path, "number", true, "<= " + number_text(range.hi), got, range_message);
  }
  return v;
}

FieldReader::FieldReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

const Json* FieldReader::find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string FieldReader::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

Result<std::optional<int64_t>> FieldReader::integer(const IntSpec& spec) const {
  const Json* v = find(spec.key);
  if (v == nullptr) return std::optional<int64_t>();
  DI_ASSIGN_OR_RETURN(int64_t i, integer_value(*v, path(spec.key), spec.lo, spec.hi, spec.range_message));
  return std::optional<int64_t>(i);
}

Result<std::optional<double>> FieldReader::number(const NumberSpec& spec) const {
  const Json* v = find(spec.key);
  if (v == nullptr) return std::optional<double>();
  DI_ASSIGN_OR_RETURN(double d, number_value(*v, path(spec.key), spec.range, spec.range_message));
  return std::optional<double>(d);
}

Result<std::optional<bool>> FieldReader::boolean(std::string_view key) const {
  const Json* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return type_error(path(key), "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<std::string>> FieldReader::string(std::string_view key) const {
  const Json* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return type_error(path(key), "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::string> FieldReader::string_or(std::string_view key, std::string fallback) const {
  DI_ASSIGN_OR_RETURN(std::optional<std::string> v, string(key));
  return v ? std::move(*v) : std::move(fallback);
}

Result<const Json*> FieldReader::object(std::string_view key) const {
  const Json* v = find(key);
  if (v != nullptr && !v->is_object()) return type_error(path(key), "an object", *v);
  return v;
}

Result<const Json*> FieldReader::array(std::string_view key) const {
  const Json* v = find(key);
  if (v != nullptr && !v->is_array()) return type_error(path(key), "an array", *v);
  return v;
}

}  // namespace deepinfer::recipe
