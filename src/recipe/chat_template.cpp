#include "recipe/chat_template.h"

#include <utility>

#include "recipe/jinja/ast.h"
#include "recipe/jinja/evaluator.h"
#include "recipe/jinja/lexer.h"
#include "recipe/jinja/parser.h"

namespace deepinfer::recipe {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Program> program) : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  DI_ASSIGN_OR_RETURN(jinja::LexedTemplate lexed, jinja::lex(source));
  DI_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse(lexed));
  auto program = std::make_unique<Program>();
  program->body = std::move(body);
  return ChatTemplate(std::move(program));
}

namespace {

// The variables transformers' apply_chat_template passes (tools and documents are always
// defined, None when absent), then the caller's extras, which may override them as kwargs do.
std::vector<std::pair<std::string, jinja::Value>> template_variables(const ChatTemplateInput& input) {
  using jinja::Value;
  std::vector<std::pair<std::string, Value>> vars;
  auto set = [&](const std::string& name, Value v) {
    for (auto& [k, existing] : vars) {
      if (k == name) {
        existing = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  };
  set("messages", jinja::from_json(input.messages));
  set("tools", jinja::from_json(input.tools));
  set("documents", Value::none());
  set("add_generation_prompt", Value::boolean(input.add_generation_prompt));
  // The tokenizer's own markers: the template may print them and the tokenizer must see them.
  set("bos_token", Value::string(input.bos_token, /*trusted=*/true));
  set("eos_token", Value::string(input.eos_token, /*trusted=*/true));
  if (input.extra.is_object()) {
    for (auto it = input.extra.begin(); it != input.extra.end(); ++it) set(it.key(), jinja::from_json(it.value()));
  }
  return vars;
}

std::vector<TemplatePiece> to_pieces(const jinja::Text& text) {
  std::vector<TemplatePiece> pieces;
  size_t begin = 0;
  for (const jinja::Text::Run& r : text.runs) {  // runs already merge equal neighbours
    pieces.push_back({text.str.substr(begin, r.end - begin), r.trusted});
    begin = r.end;
  }
  return pieces;
}

}  // namespace

Result<std::vector<TemplatePiece>> ChatTemplate::render_pieces(const ChatTemplateInput& input) const {
  jinja::Clock clock;
  if (input.now) clock = [now = *input.now] { return now; };
  jinja::Evaluator evaluator(jinja::RenderLimits{}, std::move(clock));
  try {
    return to_pieces(evaluator.render(program_->body, template_variables(input)));
  } catch (const jinja::RenderError& e) {
    return invalid_argument(std::string("chat template error: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(const ChatTemplateInput& input) const {
  DI_ASSIGN_OR_RETURN(std::vector<TemplatePiece> pieces, render_pieces(input));
  std::string out;
  for (const TemplatePiece& p : pieces) out += p.text;
  return out;
}

namespace {

nlohmann::ordered_json tool_json(const ToolDefinition& tool) {
  nlohmann::ordered_json function = nlohmann::ordered_json::object();
  function["name"] = tool.name;
  if (tool.description) function["description"] = *tool.description;
  function["parameters"] = nlohmann::ordered_json::parse(tool.parameters_json, nullptr, /*allow_exceptions=*/false);
  if (function["parameters"].is_discarded()) function["parameters"] = nullptr;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["type"] = "function";
  out["function"] = std::move(function);
  return out;
}

// Templates index arguments as a mapping (tool_call.function.arguments|items); text that is
// not a JSON object stays text, which templates print as is.
nlohmann::ordered_json arguments_json(const std::string& arguments) {
  auto parsed = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) return parsed;
  return arguments;
}

}  // namespace

ChatTemplateInput template_input(const Conversation& conversation, bool add_generation_prompt) {
  ChatTemplateInput input;
  input.add_generation_prompt = add_generation_prompt;
  std::vector<std::pair<std::string, std::string>> call_names;  // tool_call_id -> function name
  for (const Message& m : conversation.messages) {
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    // A latest-reminder is DeepSeek's; other models hear it as the user speaking.
    msg["role"] = m.role == Role::kLatestReminder ? "user" : role_name(m.role);
    msg["content"] = m.content;
    if (m.role == Role::kAssistant) {
      if (m.reasoning) msg["reasoning_content"] = *m.reasoning;
      if (!m.tool_calls.empty()) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const ToolCall& call : m.tool_calls) {
          call_names.emplace_back(call.id, call.name);
          nlohmann::ordered_json c = nlohmann::ordered_json::object();
          c["id"] = call.id;
          c["type"] = "function";
          c["function"] = {{"name", call.name}, {"arguments", arguments_json(call.arguments)}};
          calls.push_back(std::move(c));
        }
        msg["tool_calls"] = std::move(calls);
      }
    }
    if (m.role == Role::kTool) {
      std::string id = m.tool_call_id.value_or("");
      msg["tool_call_id"] = id;
      for (auto it = call_names.rbegin(); it != call_names.rend(); ++it) {
        if (it->first == id) {
          msg["name"] = it->second;
          break;
        }
      }
    }
    input.messages.push_back(std::move(msg));
  }
  if (!conversation.tools.empty()) {
    input.tools = nlohmann::ordered_json::array();
    for (const ToolDefinition& tool : conversation.tools) input.tools.push_back(tool_json(tool));
  }
  input.extra["enable_thinking"] = conversation.thinking_mode;
  return input;
}

}  // namespace deepinfer::recipe
