// Checks on a tokenizer's output that every tokenizer target makes: each returns what is wrong,
// or nullptr when nothing is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::fuzz {

inline const char* ids_problem(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.n_vocab()) return "id outside the vocabulary";
  }
  return nullptr;
}

// decode gives valid UTF-8, and pushing the ids one by one through an IncrementalDecoder gives
// exactly decode(ids), each piece valid UTF-8 on its own.
inline const char* decoding_problem(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  const std::string decoded = tokenizer.decode(ids);
  if (utf8::sanitize(decoded) != decoded) return "decode gave invalid UTF-8";
  IncrementalDecoder incremental(tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = incremental.push(id);
    if (utf8::sanitize(piece) != piece) return "a pushed piece is not valid UTF-8";
    streamed += piece;
  }
  streamed += incremental.finish();
  if (streamed != decoded) return "incremental decoding differs from decode";
  return nullptr;
}

}  // namespace deepinfer::fuzz
