#include "recipe/prompt_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace deepinfer::recipe {

std::string format_float(double value, FloatStyle style) {
  // The shortest round-trip digits come from to_chars in scientific form ("1.5e-07"); the layout
  // around them is then chosen per style.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text[0] == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  const int n = static_cast<int>(digits.size());

  const int min_fixed_exponent = style == FloatStyle::kPython ? -4 : -5;
  std::string out = negative ? "-" : "";
  if (exponent >= min_fixed_exponent && exponent < 16) {
    if (exponent >= n - 1) {
      out += digits;
      out.append(static_cast<size_t>(exponent - (n - 1)), '0');
      out += ".0";
    } else if (exponent >= 0) {
      out += digits.substr(0, static_cast<size_t>(exponent + 1));
      out += '.';
      out += digits.substr(static_cast<size_t>(exponent + 1));
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += 'e';
  if (exponent < 0) {
    out += '-';
  } else if (style != FloatStyle::kRust) {
    out += '+';
  }
  int magnitude = std::abs(exponent);
  if (style == FloatStyle::kPython && magnitude < 10) out += '0';
  out += std::to_string(magnitude);
  return out;
}

void append_json_escaped(std::string_view s, std::string& out) {
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += ch;
        }
    }
  }
}

namespace {

void dump_json(const nlohmann::ordered_json& value, FloatStyle style, bool compact,
               std::string& out);

}  // namespace

void dump_prompt_json(const nlohmann::ordered_json& value, FloatStyle style, std::string& out) {
  dump_json(value, style, /*compact=*/false, out);
}

std::string dump_compact_json(const nlohmann::ordered_json& value) {
  std::string out;
  dump_json(value, FloatStyle::kRust, /*compact=*/true, out);
  return out;
}

namespace {

void dump_json(const nlohmann::ordered_json& value, FloatStyle style, bool compact,
               std::string& out) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null:
      out += "null";
      return;
    case Type::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case Type::number_integer:
      out += std::to_string(value.get<int64_t>());
      return;
    case Type::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      return;
    case Type::number_float:
      out += format_float(value.get<double>(), style);
      return;
    case Type::string:
      out += '"';
      append_json_escaped(value.get_ref<const std::string&>(), out);
      out += '"';
      return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += compact ? "," : ", ";
        first = false;
        dump_json(item, style, compact, out);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += compact ? "," : ", ";
        first = false;
        out += '"';
        append_json_escaped(key, out);
        out += compact ? "\":" : "\": ";
        dump_json(item, style, compact, out);
      }
      out += '}';
      return;
    }
    default:  // binary and discarded values never come out of the JSON parser
      out += "null";
      return;
  }
}

}  // namespace

std::string dump_prompt_json(const nlohmann::ordered_json& value, FloatStyle style) {
  std::string out;
  dump_prompt_json(value, style, out);
  return out;
}

}  // namespace deepinfer::recipe
