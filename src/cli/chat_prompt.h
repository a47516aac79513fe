// Conversations -> prompt token ids for the CLI (run --chat, generate's "messages", chat).
//
// A model with a chat template (tokenizer.chat_template) or a DeepSeek V4 vocabulary renders as
// the server renders it (server/api_prompt.h's PromptBuilder: the template, thinking off, or
// the recipe's V4 encoder). A model without one (gemma-3-270m's GGUF, say) falls back to plain
// turns its vocabulary has the markers for: ChatML (<|im_start|>role ... <|im_end|>) or Gemma's
// <start_of_turn>user/model turns, the system text opening the first user turn (Gemma has no
// system role). Either way control tokens come only from the template or the renderer: text a
// user typed, such as "<|im_start|>", is encoded as ordinary text.
//
// Immutable after create(); render() may be called from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "recipe/conversation.h"
#include "server/api_prompt.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

class ChatRenderer {
 public:
  // `model_path` (the checkpoint's) picks the DeepSeek format, V4 or V4.1, as the server does;
  // without one, or when it holds no checkpoint, V4.1.
  explicit ChatRenderer(std::shared_ptr<const Tokenizer> tokenizer, const std::string& model_path = {});

  // `messages`: an optional system message first, then user and assistant turns ending with a
  // user turn. The ids end with the opening of the assistant's reply. INVALID_ARGUMENT for
  // another shape, a chat template that does not parse or fails to render, or a model with
  // neither a template nor turn markers.
  Result<std::vector<int32_t>> render(const std::vector<recipe::Message>& messages) const;

 private:
  Result<std::vector<int32_t>> render_plain(const std::vector<recipe::Message>& messages) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  // The model's template or DeepSeek's encoder; null: plain turns (or, with template_error
  // set, a template that does not parse).
  std::shared_ptr<const server::PromptBuilder> builder_;
  Status template_error_;
};

}  // namespace deepinfer::cli
