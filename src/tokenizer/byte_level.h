// The byte <-> character table of GPT-2 style byte-level BPE. Every byte is shown as a printable
// Unicode character so that vocabulary strings and merges are text: bytes that are printable
// Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves, the other 68 bytes
// take U+0100, U+0101, ... in byte order (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
// Pure functions over constant tables; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::byte_level {

uint32_t code_point_of_byte(uint8_t byte);

// The UTF-8 text of byte's character.
std::string char_of_byte(uint8_t byte);

// Maps vocabulary text back to bytes. A character outside the table (which a well-formed
// byte-level vocabulary never holds) is kept as its UTF-8 bytes.
std::string decode(std::string_view text);

// As decode, but text holding any character outside the table is returned unchanged, whole
// (Hugging Face's ByteLevel decoder treats a token that way).
std::string decode_whole(std::string_view text);

// Bytes -> their characters' UTF-8 text (the inverse of decode).
std::string encode(std::string_view bytes);

}  // namespace deepinfer::byte_level
