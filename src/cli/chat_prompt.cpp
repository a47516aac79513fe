#include "cli/chat_prompt.h"

namespace deepinfer::cli {

namespace {

struct Builder {
  const Tokenizer& tokenizer;
  std::vector<int32_t> ids;

  Status control(const char* token) {
    auto id = tokenizer.find_token(token);
    if (!id) return not_found(std::string("the vocabulary has no '") + token + "' token");
    ids.push_back(*id);
    return {};
  }
  void text(const std::string& s) {
    EncodeOptions plain;  // parse_special off: typed text stays text
    auto piece = tokenizer.encode(s, plain);
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
};

}  // namespace

Result<std::vector<int32_t>> render_chat_prompt(const Tokenizer& tokenizer, const std::string& system,
                                                const std::string& user) {
  Builder b{tokenizer, {}};
  if (tokenizer.add_bos_by_default() && tokenizer.bos_id() >= 0) b.ids.push_back(tokenizer.bos_id());
  if (tokenizer.find_token("<start_of_turn>")) {
    // Gemma has no system role: the system text opens the first user turn.
    DI_RETURN_IF_ERROR(b.control("<start_of_turn>"));
    b.text("user\n" + (system.empty() ? "" : system + "\n\n") + user);
    DI_RETURN_IF_ERROR(b.control("<end_of_turn>"));
    b.text("\n");
    DI_RETURN_IF_ERROR(b.control("<start_of_turn>"));
    b.text("model\n");
    return b.ids;
  }
  if (!system.empty()) {
    DI_RETURN_IF_ERROR(b.control("<|im_start|>"));
    b.text("system\n" + system);
    DI_RETURN_IF_ERROR(b.control("<|im_end|>"));
    b.text("\n");
  }
  DI_RETURN_IF_ERROR(b.control("<|im_start|>"));
  b.text("user\n" + user);
  DI_RETURN_IF_ERROR(b.control("<|im_end|>"));
  b.text("\n");
  DI_RETURN_IF_ERROR(b.control("<|im_start|>"));
  b.text("assistant\n");
  return b.ids;
}

}  // namespace deepinfer::cli
