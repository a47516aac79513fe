// Helpers shared by the grammar tests: a toy vocabulary and whole-text matching.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar::testing {

// Every single byte 0-255 (ids 0-255), a few multi-byte pieces, and a stop token (the last id).
inline std::shared_ptr<const TokenIndex> toy_vocab(std::vector<std::string> extra = {}) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"\"", "\":", "\",\"", "{\"", "\"}", "true", "false", "null", "ab", "abc", "12", "123", "},",
                        "[\"", "\"]", ", ", ": ", "  ", "\\n", "\\u00"}) {
    pieces.push_back(p);
  }
  for (std::string& e : extra) pieces.push_back(std::move(e));
  pieces.push_back("");  // the stop token
  const auto stop = static_cast<int32_t>(pieces.size() - 1);
  return TokenIndex::from_pieces(std::move(pieces), {stop});
}

inline Result<std::shared_ptr<const CompiledGrammar>> compile_spec(GrammarKind kind, const std::string& text,
                                                                    std::shared_ptr<const TokenIndex> vocab = nullptr) {
  GrammarSpec spec;
  spec.kind = kind;
  spec.text = text;
  spec.json.compact = true;
  return compile_grammar(spec, vocab ? vocab : toy_vocab(), {});
}

// The whole text is accepted (byte by byte) and the grammar may end after it.
inline bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  for (char c : text) {
    if (!m.accept_bytes(std::string(1, c))) return false;
  }
  return m.can_end();
}

}  // namespace deepinfer::grammar::testing
