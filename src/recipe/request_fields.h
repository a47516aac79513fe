// Readers of request fields, one per JSON type: the one place where a field's type and range
// are checked, for the protocol adapters here and the server's own fields (src/server).
//
// A field that is absent or null reads as nullopt: the protocol's default applies. A field of
// the wrong type, or out of its range, is a 400 (kInvalidArgument) whose message names the
// field by its path ("stream_options.include_usage", "messages[2].prefix") and says what was
// expected, in OpenAI's phrasing ("Invalid type for 'top_k': expected an integer, but got a
// string instead."), never the JSON library's. Unknown fields are not looked at.
//
// Integers are JSON integers. A number written with a fraction or an exponent (3.0, 1e3) is a
// type error, as OpenAI answers it ("expected an integer, but got a decimal number") and as
// deepseek-recipe's typed deserialization does; an integer outside [lo, hi] is a range error,
// 2^64 and beyond included (the parser keeps those as doubles, so they report as out of
// range). Nothing is clamped, truncated or wrapped here. Plain functions, thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "deepinfer/status.h"

namespace deepinfer::recipe {

// [lo, hi], or (lo, hi] with lo_open.
struct NumberRange {
  double lo = 0;
  double hi = 0;
  bool lo_open = false;
};

// One field's rule. `range_message`: the 400 for a value out of range where a reference
// implementation words it (deepseek-recipe's "Invalid temperature value, ..."); empty: ours.
// For an integer field it words integers only: a double beyond int64 (1e308) gets ours.
struct IntSpec {
  std::string_view key;
  int64_t lo = 0;
  int64_t hi = 0;
  std::string_view range_message = {};
};

struct NumberSpec {
  std::string_view key;
  NumberRange range;
  std::string_view range_message = {};
};

// Rules of fields several endpoints share (docs/server.md, "Request fields"); the messages are
// deepseek-recipe 0.2.0's.
inline constexpr NumberSpec kTemperatureSpec{
    "temperature", {0, 2}, "Invalid temperature value, the valid range of temperature is [0, 2]"};
inline constexpr NumberSpec kTopPSpec{
    "top_p", {0, 1, true}, "Invalid top_p value, the valid range of top_p is (0, 1.0]"};
inline constexpr NumberSpec kPresencePenaltySpec{
    "presence_penalty", {-2, 2},
    "Invalid presence_penalty value, the valid range of presence_penalty is [-2, 2]"};
inline constexpr NumberSpec kFrequencyPenaltySpec{
    "frequency_penalty", {-2, 2},
    "Invalid frequency_penalty value, the valid range of frequency_penalty is [-2, 2]"};
inline constexpr IntSpec kSeedSpec{"seed", 0, INT64_MAX,
                                   "Invalid seed value, the valid range of seed is [0, 2^63)"};
inline constexpr IntSpec kTopLogprobsSpec{
    "top_logprobs", 0, 20, "Invalid top_logprobs value, the valid range of top_logprobs is [0, 20]."};

// "Invalid type for '<path>': expected <expected>, but got <what `got` is> instead."
Status type_error(std::string_view path, std::string_view expected, const nlohmann::ordered_json& got);

// What a JSON value is, as a type error says it: "a string", "a decimal number", "null", ...
const char* json_type_phrase(const nlohmann::ordered_json& value);

// A value that must be an integer in [lo, hi] (array elements and the like; fields use
// FieldReader). `path` names it in the message.
Result<int64_t> integer_value(const nlohmann::ordered_json& value, std::string_view path, int64_t lo,
                              int64_t hi, std::string_view range_message = {});
Result<double> number_value(const nlohmann::ordered_json& value, std::string_view path,
                            NumberRange range, std::string_view range_message = {});

// The fields of one JSON object. A value that is not an object has no fields (every read is
// nullopt): callers that need an object check that first, with type_error. `path` names the
// object in messages ("" for the request body, "messages[2]" for a part of it). The object must
// outlive the reader.
class FieldReader {
 public:
  explicit FieldReader(const nlohmann::ordered_json& object, std::string path = {});

  // The field's value, or nullptr when it is absent or null.
  const nlohmann::ordered_json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // "key" at the top level, else "<path>.key".
  std::string path(std::string_view key) const;

  Result<std::optional<int64_t>> integer(const IntSpec& spec) const;
  Result<std::optional<double>> number(const NumberSpec& spec) const;
  Result<std::optional<bool>> boolean(std::string_view key) const;
  Result<std::optional<std::string>> string(std::string_view key) const;
  // string(key), with `fallback` for an absent or null field.
  Result<std::string> string_or(std::string_view key, std::string fallback) const;
  // Non-null pointers into the object; nullptr when the field is absent or null.
  Result<const nlohmann::ordered_json*> object(std::string_view key) const;
  Result<const nlohmann::ordered_json*> array(std::string_view key) const;

 private:
  const nlohmann::ordered_json& object_;
  std::string path_;
};

}  // namespace deepinfer::recipe
