// From a converted request to the prompt's token ids, for the served model.
//
// DeepSeek V4 vocabularies (they spell "<｜User｜>") go through the recipe's V4/V4.1 encoder;
// every other model through its own chat template (tokenizer.chat_template). Which DeepSeek
// encoder is the checkpoint's to say (deepseek_version_of): the vocabulary is the same for both. Either way the
// prompt is tokenized injection-safe: only markers the encoder or the template text placed
// become control tokens; a user who types "<|im_start|>" gets the ids of those characters.
// Immutable after create(); build() may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"
#include "recipe/chat_template.h"
#include "recipe/dsv4_encoding.h"
#include "recipe/protocol.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

struct BuiltPrompt {
  std::vector<int32_t> ids;
  // The prompt opened a tool call (tool_choice required): the parser starts inside it.
  bool ends_in_tool_calls = false;
  // Text the prompt ends with that belongs to the answer (a chat template model's forced
  // "<tool_call>" opening): fed to the output parser before the generated text.
  std::string output_prefix;
  // A forced call (forced_call.h): the answer gets this once the object the model writes
  // closes, and the call is complete there (see OutputShaper). Empty otherwise.
  std::string output_closing;
  // The grammar of a forced call, or of the calls of strict tools under tool_choice auto
  // (started by the block's opening); kNone otherwise.
  Constraint constraint;
  // True for the strict-tools grammar: a response format or structured-output field takes its
  // place (a request with both gets the format, as before).
  bool constraint_yields = false;
};

// The DeepSeek prompt format for a checkpoint's architecture (general.architecture): DeepSeek V4
// (model_type deepseek_v4) is rendered as V4; any other model with a DeepSeek vocabulary as V4.1,
// the newer format and the model this project serves.
recipe::ModelVersion deepseek_version_of(std::string_view architecture);

// The architecture a model path's checkpoint declares (general.architecture); the error when
// the path holds no readable checkpoint (a tokenizer-only directory).
Result<std::string> model_architecture(const std::string& path);

// The steps of PromptBuilder::build, shared with the recipe endpoints (/v1/render), which show a
// prompt in any DeepSeek format whatever model is served.
// The DeepSeek encoder's pieces as ids of a DeepSeek V4 vocabulary: special pieces become their
// token, text pieces are encoded with no special token parsed.
Result<std::vector<int32_t>> deepseek_prompt_ids(const Tokenizer& tokenizer,
                                                 const std::vector<recipe::PromptPiece>& pieces);
// A conversation through the model's chat template, thinking off (templates have no thinking
// stage the output parser knows); the template's own text is marked trusted.
Result<std::vector<recipe::TemplatePiece>> render_template_pieces(const recipe::ChatTemplate& chat_template,
                                                                  const Tokenizer& tokenizer,
                                                                  recipe::Conversation conversation);
// Trusted pieces are encoded with control tokens parsed, the request's text without.
std::vector<int32_t> template_prompt_ids(const Tokenizer& tokenizer, const std::vector<recipe::TemplatePiece>& pieces);

class PromptBuilder {
 public:
  // INVALID_ARGUMENT when the model's chat template cannot be parsed. A model with no template
  // at all (a base model) is served: /v1/completions works, conversations get a 400 from build().
  // `architecture` (the checkpoint's) picks the DeepSeek format, see deepseek_version_of.
  static Result<std::unique_ptr<PromptBuilder>> create(std::shared_ptr<const Tokenizer> tokenizer,
                                                       std::string_view architecture = {});

  bool is_deepseek() const { return deepseek_; }
  // The format requests naming the served model render with: a DeepSeek version, or the chat
  // template.
  recipe::ModelVersion model_version() const { return deepseek_ ? deepseek_version_ : recipe::ModelVersion::kChatTemplate; }
  // Whether the prompt format has a thinking mode (DeepSeek V4's <think>).
  bool has_thinking_mode() const { return is_deepseek(); }

  // The request as token ids. For a model without thinking mode, thinking is switched off in
  // the conversation first. INVALID_ARGUMENT for a template render error, or when the model has
  // no chat template.
  Result<BuiltPrompt> build(const recipe::ConversationRequest& request) const;

  // Sets the parsing options the request's output needs for this model (thinking stage, tool
  // calls opened by the prompt).
  void adjust_parsing(const BuiltPrompt& prompt, recipe::ConversationRequest& request) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  // Null for DeepSeek vocabularies and for models without a template.
  const recipe::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }

 private:
  PromptBuilder(std::shared_ptr<const Tokenizer> tokenizer, bool deepseek, recipe::ModelVersion deepseek_version,
                std::optional<recipe::ChatTemplate> tmpl)
      : tokenizer_(std::move(tokenizer)),
        deepseek_(deepseek),
        deepseek_version_(deepseek_version),
        chat_template_(std::move(tmpl)) {}
  Result<BuiltPrompt> build_deepseek(const recipe::ConversationRequest& request) const;
  Result<BuiltPrompt> build_template(const recipe::ConversationRequest& request) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  bool deepseek_ = false;                              // the recipe's V4/V4.1 encoder
  recipe::ModelVersion deepseek_version_ = recipe::ModelVersion::kDeepseekV41Flash;
  std::optional<recipe::ChatTemplate> chat_template_;  // else the model's template, if it has one
};

}  // namespace deepinfer::server
