// A plain chat rendering for `deepinfer run --chat`, until the recipe library brings each
// model's real template: ChatML (<|im_start|>role ... <|im_end|>) or, for vocabularies with
// <start_of_turn>, Gemma's turns. Control tokens are placed as token ids; the user's text is
// encoded as ordinary text, so "<|im_start|>" typed by a user never becomes a control token.
#pragma once

#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

Result<std::vector<int32_t>> render_chat_prompt(const Tokenizer& tokenizer, const std::string& system,
                                                const std::string& user);

}  // namespace deepinfer::cli
