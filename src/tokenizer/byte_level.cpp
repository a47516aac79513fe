#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace deepinfer::byte_level {

namespace {

bool stands_for_itself(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> code_point{};
  std::array<int16_t, 512> byte_of{};  // indexed by code point; every table code point is < 0x144

  Tables() {
    byte_of.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      code_point[b] = stands_for_itself(b) ? b : next++;
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t code_point_of_byte(uint8_t byte) { return tables().code_point[byte]; }

std::string char_of_byte(uint8_t byte) {
  std::string out;
  utf8::append_code_point(code_point_of_byte(byte), &out);
  return out;
}

namespace {

// Decodes text into *out; false at the first character outside the table when strict.
bool decode_into(std::string_view text, bool strict, std::string* out) {
  const Tables& t = tables();
  out->reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8::valid_length(text, pos);
    if (n == 0) {  // not UTF-8: pass the byte through
      if (strict) return false;
      out->push_back(text[pos++]);
      continue;
    }
    uint32_t cp;
    const auto b0 = static_cast<uint8_t>(text[pos]);
    if (n == 1) {
      cp = b0;
    } else {
      cp = b0 & (0x7F >> n);
      for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
    }
    if (cp < t.byte_of.size() && t.byte_of[cp] >= 0) {
      out->push_back(static_cast<char>(t.byte_of[cp]));
    } else {
      if (strict) return false;
      out->append(text.substr(pos, n));
    }
    pos += n;
  }
  return true;
}

}  // namespace

std::string decode(std::string_view text) {
  std::string out;
  decode_into(text, /*strict=*/false, &out);
  return out;
}

std::string decode_whole(std::string_view text) {
  std::string out;
  if (!decode_into(text, /*strict=*/true, &out)) return std::string(text);
  return out;
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::append_code_point(code_point_of_byte(static_cast<uint8_t>(c)), &out);
  return out;
}

}  // namespace deepinfer::byte_level
