// JSON as it appears inside DeepSeek prompts: Python json.dumps spacing (", " and ": "), key
// order preserved, non-ASCII written raw. Only the float spelling varies, and it varies by
// prompt format and place (recipe 0.2.0), so it is a parameter. Pure functions, thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer::recipe {

enum class FloatStyle {
  // Rust serde_json (ryu): decimal for exponents -5..15, else "1e20", "1.5e-7".
  kRust,
  // As kRust, but a positive exponent gets a plus sign: "1e+20" (V4 tools block).
  kRustPlus,
  // Python repr: decimal for exponents -4..15, else "1e+20", "1e-05" (V4.1).
  kPython,
};

std::string format_float(double value, FloatStyle style);

// serde_json's compact form (no spaces, Rust floats), as response bodies carry JSON values.
std::string dump_compact_json(const nlohmann::ordered_json& value);

// Appends `value` written prompt-style to `out`.
void dump_prompt_json(const nlohmann::ordered_json& value, FloatStyle style, std::string& out);
std::string dump_prompt_json(const nlohmann::ordered_json& value, FloatStyle style);

// Appends `s` with JSON string escaping but without the surrounding quotes.
void append_json_escaped(std::string_view s, std::string& out);

}  // namespace deepinfer::recipe
