#include "tokenizer/utf8.h"

namespace deepinfer::utf8 {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

namespace {

enum class Scan { kValid, kIncomplete, kInvalid };

struct ScanResult {
  Scan kind;
  size_t length;  // kValid: the sequence; kIncomplete: the bytes present; kInvalid: the maximal subpart (>= 1)
};

// The allowed range of the second byte for a lead byte (the first-byte-specific limits of the
// UTF-8 table exclude overlong forms, surrogates and code points above U+10FFFF).
ScanResult scan(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {Scan::kValid, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Scan::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) return {Scan::kIncomplete, i};
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Scan::kInvalid, i};
  }
  return {Scan::kValid, need};
}

}  // namespace

size_t valid_length(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const ScanResult r = scan(s, pos);
  return r.kind == Scan::kValid ? r.length : 0;
}

size_t incomplete_length(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const ScanResult r = scan(s, pos);
  return r.kind == Scan::kIncomplete ? r.length : 0;
}

size_t append_sanitized(std::string_view s, bool hold_incomplete, std::string* out) {
  size_t pos = 0;
  size_t run_start = 0;  // start of the run of valid bytes not yet appended
  while (pos < s.size()) {
    const ScanResult r = scan(s, pos);
    if (r.kind == Scan::kValid) {
      pos += r.length;
      continue;
    }
    out->append(s.substr(run_start, pos - run_start));
    if (r.kind == Scan::kIncomplete && hold_incomplete) return pos;
    out->append(kReplacement);
    pos += r.length;
    run_start = pos;
  }
  out->append(s.substr(run_start, pos - run_start));
  return pos;
}

void append_code_point(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace deepinfer::utf8
