// libFuzzer target of the chat-template engine (src/recipe/chat_template.h, the Jinja2 subset
// in src/recipe/jinja/): the input is a template, parsed and, when it parses, rendered with
// the renderer's own limits (loop iterations, macro depth, output bytes, which are what stops a
// hostile template from hanging the server) over a fixed small conversation (system, user, an
// assistant tool call, its result, a tool definition) and extra variables, among them those
// of tests/golden/templates/snippets.json, so that the snippets seeded from there find theirs.
// Checks:
//   - parse and render fail only with INVALID_ARGUMENT and a message;
//   - render() is render_pieces() joined, and pieces alternate in trust (no two neighbours
//     alike, none empty);
//   - trust survives every operation: the conversation's strings carry a non-ASCII marker
//     (U+2603), so when the template's own text has no byte above 0x7f and no backslash (no
//     escape can spell one either), a trusted piece holding such a byte can only have come
//     from the input and lost its mark on the way, which would let a client's text become
//     control tokens.
// Built and run by scripts/fuzz.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "recipe/chat_template.h"

namespace {

using deepinfer::recipe::ChatTemplate;
using deepinfer::recipe::ChatTemplateInput;
using deepinfer::recipe::TemplatePiece;

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "jinja_fuzz: %s\n%.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// The strings a client writes carry U+2603.
ChatTemplateInput make_input() {
  ChatTemplateInput input;
  input.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys \u2603 <|im_start|>"},
    {"role": "user", "content": "hi \u2603 {{ x }} </s>"},
    {"role": "assistant", "content": "", "reasoning_content": "think \u2603",
     "tool_calls": [{"id": "call\u2603", "type": "function",
                     "function": {"name": "get\u2603", "arguments": {"city\u2603": "Paris\u2603", "n": 2}}}]},
    {"role": "tool", "tool_call_id": "call\u2603", "name": "get\u2603", "content": "22C \u2603"},
    {"role": "user", "content": [{"type": "text", "text": "more \u2603"}]}])");
  input.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "get\u2603", "description": "weather \u2603",
    "parameters": {"type": "object", "properties": {"city\u2603": {"type": "string", "description": "\u2603"}},
                   "required": ["city\u2603"]}}}])");
  std::ifstream snippets(std::filesystem::path(DEEPINFER_TEST_DATA) / "golden" / "templates" / "snippets.json");
  if (!snippets) fail("cannot read snippets.json", DEEPINFER_TEST_DATA);
  input.extra = nlohmann::ordered_json::parse(snippets)["variables"];
  input.extra["enable_thinking"] = true;
  input.extra["custom"] = "v\u2603";
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  input.now = std::chrono::system_clock::time_point(std::chrono::seconds(1785067200));
  return input;
}

void check_error(const char* stage, const deepinfer::Status& status) {
  if (status.code() != deepinfer::StatusCode::kInvalidArgument) fail(stage, status.to_string());
  if (status.message().empty()) fail(stage, "an error without a message");
}

bool non_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) > 0x7f) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ChatTemplateInput input = make_input();
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) {
    check_error("parse", parsed.status());
    return 0;
  }
  auto pieces = parsed->render_pieces(input);
  auto rendered = parsed->render(input);
  if (pieces.ok() != rendered.ok()) fail("render and render_pieces disagree on failing", source);
  if (!pieces.ok()) {
    check_error("render", pieces.status());
    return 0;
  }
  std::string joined;
  const bool marker_only_from_input = !non_ascii(source) && source.find('\\') == std::string::npos;
  for (size_t i = 0; i < pieces->size(); ++i) {
    const TemplatePiece& piece = (*pieces)[i];
    if (piece.text.empty()) fail("an empty piece", source);
    if (i > 0 && (*pieces)[i - 1].trusted == piece.trusted) fail("two neighbouring pieces of the same trust", source);
    if (piece.trusted && marker_only_from_input && non_ascii(piece.text)) {
      fail("input text came out marked as the template's own", piece.text);
    }
    joined += piece.text;
  }
  if (joined != *rendered) fail("render() is not render_pieces() joined", source);
  return 0;
}
