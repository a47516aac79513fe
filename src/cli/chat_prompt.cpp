#include "cli/chat_prompt.h"

#include "recipe/protocol.h"

namespace deepinfer::cli {

namespace {

using recipe::Message;
using recipe::Role;

struct Builder {
  const Tokenizer& tokenizer;
  std::vector<int32_t> ids;

  Status control(const char* token) {
    auto id = tokenizer.find_token(token);
    if (!id) return invalid_argument(std::string("the vocabulary has no '") + token + "' token");
    ids.push_back(*id);
    return {};
  }
  void text(const std::string& s) {
    EncodeOptions plain;  // parse_special off: typed text stays text
    auto piece = tokenizer.encode(s, plain);
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
  Status turn(const char* open, const std::string& role, const std::string& content, const char* close) {
    DI_RETURN_IF_ERROR(control(open));
    text(role + "\n" + content);
    DI_RETURN_IF_ERROR(control(close));
    text("\n");
    return {};
  }
};

Status check_shape(const std::vector<Message>& messages) {
  if (messages.empty() || messages.back().role != Role::kUser) {
    return invalid_argument("a conversation must end with a user message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Role role = messages[i].role;
    if (role == Role::kSystem && i == 0) continue;
    if (role != Role::kUser && role != Role::kAssistant) {
      return invalid_argument(std::string("a '") + recipe::role_name(role) + "' message at position " +
                              std::to_string(i) +
                              " (the CLI renders one optional system message first, then user and assistant turns)");
    }
  }
  return {};
}

}  // namespace

ChatRenderer::ChatRenderer(std::shared_ptr<const Tokenizer> tokenizer, const std::string& model_path)
    : tokenizer_(std::move(tokenizer)) {
  if (tokenizer_->chat_template().empty() && !tokenizer_->find_token(recipe::kUserToken)) return;
  std::string architecture;
  if (!model_path.empty()) {
    if (auto arch = server::model_architecture(model_path); arch.ok()) architecture = std::move(arch).value();
  }
  auto builder = server::PromptBuilder::create(tokenizer_, architecture);
  if (builder.ok()) {
    builder_ = std::move(builder).value();
  } else {
    template_error_ = builder.status();
  }
}

Result<std::vector<int32_t>> ChatRenderer::render(const std::vector<Message>& messages) const {
  DI_RETURN_IF_ERROR(check_shape(messages));
  DI_RETURN_IF_ERROR(template_error_);
  if (!builder_) return render_plain(messages);
  recipe::ConversationRequest request;
  request.conversation.messages = messages;
  request.conversation.thinking_mode = false;
  request.model_version = builder_->model_version();
  DI_ASSIGN_OR_RETURN(server::BuiltPrompt prompt, builder_->build(request));
  return std::move(prompt.ids);
}

Result<std::vector<int32_t>> ChatRenderer::render_plain(const std::vector<Message>& messages) const {
  const Tokenizer& tok = *tokenizer_;
  Builder b{tok, {}};
  if (tok.add_bos_by_default() && tok.bos_id() >= 0) b.ids.push_back(tok.bos_id());
  const bool has_system = messages.front().role == Role::kSystem;
  if (tok.find_token("<start_of_turn>")) {
    std::string system = has_system && !messages.front().content.empty() ? messages.front().content + "\n\n" : "";
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
      const bool user = messages[i].role == Role::kUser;
      DI_RETURN_IF_ERROR(b.turn("<start_of_turn>", user ? "user" : "model", system + messages[i].content,
                                "<end_of_turn>"));
      system.clear();
    }
    DI_RETURN_IF_ERROR(b.control("<start_of_turn>"));
    b.text("model\n");
    return std::move(b.ids);
  }
  if (!tok.find_token("<|im_start|>")) {
    return invalid_argument(
        "the model has no chat template, and its vocabulary has neither ChatML's <|im_start|> nor Gemma's "
        "<start_of_turn> to write turns with");
  }
  for (const Message& m : messages) {
    if (m.role == Role::kSystem && m.content.empty()) continue;
    DI_RETURN_IF_ERROR(b.turn("<|im_start|>", recipe::role_name(m.role), m.content, "<|im_end|>"));
  }
  DI_RETURN_IF_ERROR(b.control("<|im_start|>"));
  b.text("assistant\n");
  return std::move(b.ids);
}

}  // namespace deepinfer::cli
