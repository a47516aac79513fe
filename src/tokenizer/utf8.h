// UTF-8 helpers for the tokenizer: sequence lengths, validation and the replacement of invalid
// bytes with U+FFFD. Pure functions; safe from any thread.
//
// Replacement follows the "maximal subpart" practice of the Unicode standard (what Python's
// bytes.decode(errors="replace") does): a valid lead byte with some valid continuation bytes
// that ends early becomes one U+FFFD, and every other invalid byte becomes one U+FFFD. The rule
// only looks forward within one sequence, so sanitizing a stream in pieces (holding back an
// incomplete tail) gives the same text as sanitizing it whole; IncrementalDecoder relies on that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::utf8 {

// `text` with every occurrence of `from` (non-empty) replaced by `to`, left to right.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid sequence starting at s[pos], or 0 when the bytes there are not a complete
// valid sequence (invalid, or cut off by the end of s).
size_t valid_length(std::string_view s, size_t pos);

// Bytes of s[pos..] that form a valid but incomplete sequence cut off by the end of s (a prefix
// that more bytes could complete), or 0 when s[pos..] is not such a prefix.
size_t incomplete_length(std::string_view s, size_t pos);

// Appends s to out with invalid sequences replaced by U+FFFD. When hold_incomplete is true and s
// ends with an incomplete (but so far valid) sequence, those bytes are not appended; the return
// value is the number of bytes of s consumed.
size_t append_sanitized(std::string_view s, bool hold_incomplete, std::string* out);

inline std::string sanitize(std::string_view s) {
  std::string out;
  append_sanitized(s, /*hold_incomplete=*/false, &out);
  return out;
}

// Appends the UTF-8 encoding of code point cp (cp <= 0x10FFFF).
void append_code_point(uint32_t cp, std::string* out);

}  // namespace deepinfer::utf8
