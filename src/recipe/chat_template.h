// Chat templates of models other than DeepSeek V4: the Jinja2 subset real chat templates use,
// rendered exactly as Python's jinja2 does when transformers' apply_chat_template calls it
// (trim_blocks and lstrip_blocks on, raise_exception, tojson, strftime_now, loop variables,
// namespaces, macros, filters and tests those templates use).
//
// Injection safety: render_pieces() marks each piece of output with where it came from. Text
// written in the template itself is trusted (it may spell control tokens such as
// "<|im_start|>"); text that comes from the input (message contents, tool descriptions, ...) is
// not, even after string operations, so a tokenizer encodes it with special-token spellings as
// plain text (Tokenizer::encode_segments with the trusted pieces parsed for specials).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe {

struct TemplatePiece {
  std::string text;
  bool trusted = false;  // from the template's own text
};

// Ordered JSON: templates print dicts (tojson, tool schemas) in their insertion order, as
// Python does, so the client's key order must survive to the template.
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // Hugging Face chat messages
  nlohmann::ordered_json tools;  // null, or an array of {"type":"function","function":{...}}
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // further variables (enable_thinking, ...)
  std::string bos_token;
  std::string eos_token;
  std::optional<std::chrono::system_clock::time_point> now;  // strftime_now's clock; unset: the real one
};

class ChatTemplate {
 public:
  // INVALID_ARGUMENT with line and column for a syntax error or an unsupported construct.
  static Result<ChatTemplate> parse(const std::string& source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // INVALID_ARGUMENT for a render error (raise_exception's message, an undefined attribute used
  // where jinja2 would raise, a runaway loop or recursion).
  Result<std::vector<TemplatePiece>> render_pieces(const ChatTemplateInput& input) const;
  Result<std::string> render(const ChatTemplateInput& input) const;  // the pieces concatenated

 private:
  struct Program;
  explicit ChatTemplate(std::unique_ptr<Program> program);
  std::unique_ptr<Program> program_;
};

// A Conversation as the Hugging Face messages and tools a template expects (assistant tool
// calls with JSON-object arguments, tool results with tool_call_id and name, reasoning as
// "reasoning_content").
ChatTemplateInput template_input(const Conversation& conversation, bool add_generation_prompt);

}  // namespace deepinfer::recipe
