#include "recipe/custom_tool_input.h"

#include <cstdint>
#include <optional>

namespace deepinfer::recipe {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class PrefixMatch { kPartial, kFull, kMismatch };

// Whether `s` starts with `{ "input" : "` (whitespace allowed between the tokens); on kFull,
// `end` is the offset just after the opening quote of the value.
PrefixMatch match_prefix(std::string_view s, size_t& end) {
  static constexpr std::string_view kTokens[] = {"{", "\"input\"", ":", "\""};
  size_t i = 0;
  for (std::string_view token : kTokens) {
    while (i < s.size() && is_space(s[i])) ++i;
    for (char c : token) {
      if (i == s.size()) return PrefixMatch::kPartial;
      if (s[i++] != c) return PrefixMatch::kMismatch;
    }
  }
  end = i;
  return PrefixMatch::kFull;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<uint32_t> hex4(std::string_view s) {
  uint32_t v = 0;
  for (char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v |= c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v |= c - 'A' + 10;
    } else {
      return std::nullopt;
    }
  }
  return v;
}

}  // namespace

std::string CustomToolInputDecoder::feed(std::string_view fragment) {
  switch (stage_) {
    case Stage::kDone:
      return "";
    case Stage::kPassThrough:
      return std::string(fragment);
    case Stage::kPrefix: {
      pending_.append(fragment);
      size_t end = 0;
      switch (match_prefix(pending_, end)) {
        case PrefixMatch::kPartial:
          return "";
        case PrefixMatch::kMismatch: {
          stage_ = Stage::kPassThrough;
          std::string raw = std::move(pending_);
          pending_.clear();
          return raw;
        }
        case PrefixMatch::kFull:
          stage_ = Stage::kString;
          pending_.erase(0, end);
          return decode_pending();
      }
      return "";
    }
    case Stage::kString:
      pending_.append(fragment);
      return decode_pending();
  }
  return "";
}

std::string CustomToolInputDecoder::finish() {
  if (stage_ != Stage::kPrefix) return "";
  stage_ = Stage::kPassThrough;
  std::string raw = std::move(pending_);
  pending_.clear();
  return raw;
}

// Decodes pending_ up to an unfinished escape (kept) or the closing quote (kDone).
std::string CustomToolInputDecoder::decode_pending() {
  std::string out;
  size_t i = 0;
  const std::string_view s = pending_;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      stage_ = Stage::kDone;
      pending_.clear();
      return out;
    }
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) break;
    const char e = s[i + 1];
    if (e != 'u') {
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        default:
          out += e;
          break;  // \" \\ \/ and, leniently, any other escaped byte
      }
      i += 2;
      continue;
    }
    if (i + 6 > s.size()) break;
    std::optional<uint32_t> cp = hex4(s.substr(i + 2, 4));
    if (!cp) {  // not an escape after all: keep the text as written
      out.append(s.substr(i, 2));
      i += 2;
      continue;
    }
    if (*cp >= 0xD800 && *cp < 0xDC00) {
      // A high surrogate needs the low one that follows before anything can be written.
      if (i + 12 > s.size()) {
        const bool lone =
            (s.size() - i > 6 && s[i + 6] != '\\') || (s.size() - i > 7 && s[i + 7] != 'u');
        if (lone) {
          append_utf8(0xFFFD, out);
          i += 6;
          continue;
        }
        break;
      }
      std::optional<uint32_t> low =
          s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s.substr(i + 8, 4)) : std::nullopt;
      if (low && *low >= 0xDC00 && *low < 0xE000) {
        append_utf8(0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00), out);
        i += 12;
      } else {
        append_utf8(0xFFFD, out);
        i += 6;
      }
      continue;
    }
    append_utf8(*cp >= 0xDC00 && *cp < 0xE000 ? 0xFFFD : *cp, out);
    i += 6;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace deepinfer::recipe
