// LoadOptions that hand a model its tokenizer's Engram classes, as the engine does (DeepSeek
// V4.1's Engram layers need them): for tests that load models directly. Needs the tokenizer
// library (golden tests link it through the engine).
#pragma once

#include <string>

#include "model/loader/tensor_source.h"
#include "tokenizer/engram_classes.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::testing {

inline LoadOptions tokenizer_load_options(const std::string& dir) {
  LoadOptions options;
  options.token_classes = [dir]() -> Result<TokenClasses> {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, load_tokenizer(dir, TokenizerPresence::kRequired));
    TokenClasses c;
    c.of_token = engram_token_classes(*tok, &c.count);
    return c;
  };
  return options;
}

}  // namespace deepinfer::testing
