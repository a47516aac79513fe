#include "recipe/responses_response.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "recipe/custom_tool_input.h"
#include "recipe/prompt_json.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

enum class ItemKind { kReasoning, kMessage, kFunctionCall, kCustomToolCall };

// One output item. `text` is the reasoning or message text, the function call's arguments or the
// custom tool call's decoded input.
struct Item {
  ItemKind kind;
  std::string id;
  std::string status = "in_progress";
  std::string phase = "final_answer";  // messages: "commentary" once a tool call follows
  std::string call_id;
  std::string name;
  std::optional<std::string> ns;
  std::string text;
  std::string encrypted_content;  // reasoning
};

int64_t wall_clock() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json item_json(const Item& item, bool with_content) {
  Json j = Json::object();
  switch (item.kind) {
    case ItemKind::kReasoning:
      j["type"] = "reasoning";
      j["id"] = item.id;
      j["status"] = item.status;
      j["content"] = Json::array();
      if (with_content) j["content"].push_back({{"type", "reasoning_text"}, {"text", item.text}});
      j["summary"] = Json::array();
      j["encrypted_content"] = item.encrypted_content;
      break;
    case ItemKind::kMessage:
      j["type"] = "message";
      j["id"] = item.id;
      j["status"] = item.status;
      j["role"] = "assistant";
      j["phase"] = item.phase;
      j["content"] = Json::array();
      if (with_content) {
        j["content"].push_back({{"type", "output_text"},
                                {"annotations", Json::array()},
                                {"logprobs", Json::array()},
                                {"text", item.text}});
      }
      break;
    case ItemKind::kFunctionCall:
      j["type"] = "function_call";
      j["id"] = item.id;
      j["status"] = item.status;
      j["call_id"] = item.call_id;
      j["name"] = item.name;
      if (item.ns) j["namespace"] = *item.ns;
      j["arguments"] = item.text;
      break;
    case ItemKind::kCustomToolCall:
      j["type"] = "custom_tool_call";
      j["id"] = item.id;
      j["status"] = item.status;
      j["call_id"] = item.call_id;
      j["name"] = item.name;
      j["input"] = item.text;
      break;
  }
  return j;
}

Json part_json(const Item& item, const std::string& text) {
  if (item.kind == ItemKind::kReasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"},
          {"annotations", Json::array()},
          {"logprobs", Json::array()},
          {"text", text}};
}

Json usage_json(const Usage& u) {
  Json j = Json::object();
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = {{"cached_tokens", u.prompt_cache_hit_tokens}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = {{"reasoning_tokens", 0}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

// kLength and kContentFilter leave the response (and its open item) incomplete.
const char* incomplete_reason(BackendFinish finish) {
  switch (finish) {
    case BackendFinish::kLength:
      return "max_output_tokens";
    case BackendFinish::kContentFilter:
      return "content_filter";
    default:
      return nullptr;
  }
}

}  // namespace

struct ResponsesWriter::State {
  ResponsesResponseSettings settings;
  Json echo;
  int64_t created_at = 0;
  int64_t sequence = 0;
  std::vector<Item> items;
  bool open = false;  // items.back() is the active item
  size_t calls = 0;
  CustomToolInputDecoder decoder;

  ResponsesEvent event(const char* type, Json j) {
    j["sequence_number"] = sequence++;
    return {type, dump_compact_json(j)};
  }

  Json response(const char* status, std::optional<int64_t> completed_at, const char* incomplete,
                const std::vector<Item>& output, const Usage* usage) const {
    Json j = Json::object();
    j["id"] = settings.id;
    j["object"] = "response";
    j["created_at"] = created_at;
    j["status"] = status;
    j["background"] = false;
    j["completed_at"] = completed_at ? Json(*completed_at) : Json();
    j["content_filters"] = nullptr;
    j["error"] = nullptr;
    j["frequency_penalty"] = 0.0;
    j["incomplete_details"] = incomplete ? Json({{"reason", incomplete}}) : Json();
    j["instructions"] = echo["instructions"];
    j["max_output_tokens"] = echo["max_output_tokens"];
    j["max_tool_calls"] = nullptr;
    j["model"] = settings.model;
    j["moderation"] = nullptr;
    j["output"] = Json::array();
    for (const Item& item : output) j["output"].push_back(item_json(item, true));
    j["parallel_tool_calls"] = true;
    j["presence_penalty"] = 0.0;
    j["previous_response_id"] = nullptr;
    j["prompt_cache_key"] = nullptr;
    j["prompt_cache_retention"] = nullptr;
    j["reasoning"] = echo["reasoning"];
    j["safety_identifier"] = nullptr;
    j["service_tier"] = "default";
    j["store"] = false;
    j["temperature"] = echo["temperature"];
    j["text"] = echo["text"];
    j["tool_choice"] = echo["tool_choice"];
    j["tools"] = echo["tools"];
    j["top_logprobs"] = echo["top_logprobs"];
    j["top_p"] = echo["top_p"];
    j["truncation"] = "disabled";
    j["usage"] = usage ? usage_json(*usage) : Json();
    j["user"] = echo["user"];
    j["metadata"] = Json::object();
    return j;
  }

  void open_item(Item item, std::vector<ResponsesEvent>& out) {
    item.id += settings.id + "_" + std::to_string(items.size());
    if (item.kind == ItemKind::kReasoning) {
      item.encrypted_content = settings.id + "-" + std::to_string(items.size());
    }
    items.push_back(std::move(item));
    open = true;
    const Item& it = items.back();
    const int64_t index = static_cast<int64_t>(items.size() - 1);
    out.push_back(event("response.output_item.added", {{"type", "response.output_item.added"},
                                                       {"item", item_json(it, false)},
                                                       {"output_index", index}}));
    if (it.kind == ItemKind::kReasoning || it.kind == ItemKind::kMessage) {
      out.push_back(event("response.content_part.added", {{"type", "response.content_part.added"},
                                                          {"content_index", 0},
                                                          {"item_id", it.id},
                                                          {"output_index", index},
                                                          {"part", part_json(it, "")}}));
    }
  }

  void delta(const std::string& text, std::vector<ResponsesEvent>& out) {
    Item& it = items.back();
    const int64_t index = static_cast<int64_t>(items.size() - 1);
    Json j = Json::object();
    const char* type = nullptr;
    switch (it.kind) {
      case ItemKind::kReasoning:
        type = "response.reasoning_text.delta";
        j = {{"type", type},
             {"content_index", 0},
             {"delta", text},
             {"item_id", it.id},
             {"output_index", index}};
        break;
      case ItemKind::kMessage:
        type = "response.output_text.delta";
        j = {{"type", type},     {"content_index", 0},        {"delta", text},
             {"item_id", it.id}, {"logprobs", Json::array()}, {"output_index", index}};
        break;
      case ItemKind::kFunctionCall:
        type = "response.function_call_arguments.delta";
        j = {{"type", type}, {"delta", text}, {"item_id", it.id}, {"output_index", index}};
        break;
      case ItemKind::kCustomToolCall:
        type = "response.custom_tool_call_input.delta";
        j = {{"type", type}, {"delta", text}, {"item_id", it.id}, {"output_index", index}};
        break;
    }
    it.text += text;
    out.push_back(event(type, std::move(j)));
  }

  void close(const char* status, std::vector<ResponsesEvent>& out) {
    if (!open) return;
    open = false;
    Item& it = items.back();
    if (it.kind == ItemKind::kCustomToolCall) {
      std::string rest = decoder.finish();
      if (!rest.empty()) delta(rest, out);
    }
    it.status = status;
    const int64_t index = static_cast<int64_t>(items.size() - 1);
    switch (it.kind) {
      case ItemKind::kReasoning:
        out.push_back(
            event("response.reasoning_text.done", {{"type", "response.reasoning_text.done"},
                                                   {"content_index", 0},
                                                   {"item_id", it.id},
                                                   {"output_index", index},
                                                   {"sequence_number", 0},
                                                   {"text", it.text}}));
        break;
      case ItemKind::kMessage:
        out.push_back(event("response.output_text.done", {{"type", "response.output_text.done"},
                                                          {"content_index", 0},
                                                          {"item_id", it.id},
                                                          {"logprobs", Json::array()},
                                                          {"output_index", index},
                                                          {"sequence_number", 0},
                                                          {"text", it.text}}));
        break;
      case ItemKind::kFunctionCall:
        out.push_back(event("response.function_call_arguments.done",
                            {{"type", "response.function_call_arguments.done"},
                             {"arguments", it.text},
                             {"item_id", it.id},
                             {"output_index", index}}));
        break;
      case ItemKind::kCustomToolCall:
        out.push_back(event("response.custom_tool_call_input.done",
                            {{"type", "response.custom_tool_call_input.done"},
                             {"input", it.text},
                             {"item_id", it.id},
                             {"output_index", index}}));
        break;
    }
    if (it.kind == ItemKind::kReasoning || it.kind == ItemKind::kMessage) {
      out.push_back(event("response.content_part.done", {{"type", "response.content_part.done"},
                                                         {"content_index", 0},
                                                         {"item_id", it.id},
                                                         {"output_index", index},
                                                         {"part", part_json(it, it.text)}}));
    }
    out.push_back(event("response.output_item.done", {{"type", "response.output_item.done"},
                                                      {"item", item_json(it, true)},
                                                      {"output_index", index}}));
  }

  void start_call(const std::string& name, std::vector<ResponsesEvent>& out) {
    if (open && items.back().kind == ItemKind::kMessage) items.back().phase = "commentary";
    close("completed", out);
    Item item;
    item.call_id = settings.tool_call_id(calls++);
    item.name = name;
    if (settings.echo.custom_tools.count(name)) {
      item.kind = ItemKind::kCustomToolCall;
      item.id = "ctc_";
      decoder = CustomToolInputDecoder();
    } else {
      item.kind = ItemKind::kFunctionCall;
      item.id = "fc_";
      for (const auto& [full, split] : settings.echo.namespace_tools) {
        if (full != name) continue;
        item.ns = split.first;
        item.name = split.second;
        break;
      }
    }
    open_item(std::move(item), out);
  }

  // The output as the final response holds it: the open item closed with `status`.
  std::vector<Item> closed_output(const char* status) const {
    std::vector<Item> output = items;
    if (open) {
      Item& it = output.back();
      it.status = status;
      if (it.kind == ItemKind::kCustomToolCall) {
        CustomToolInputDecoder d = decoder;
        it.text += d.finish();
      }
    }
    return output;
  }
};

ResponsesWriter::ResponsesWriter(ResponsesResponseSettings settings)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.settings = std::move(settings);
  if (!s.settings.tool_call_id) s.settings.tool_call_id = random_tool_call_id;
  if (!s.settings.clock) s.settings.clock = wall_clock;
  s.created_at = s.settings.clock();
  s.echo = s.settings.echo.settings_json.empty()
               ? Json::object()
               : Json::parse(s.settings.echo.settings_json, nullptr, false);
  // An empty echo stands for a request that specified nothing.
  if (!s.echo.is_object()) s.echo = Json::object();
  const Json defaults = {{"instructions", nullptr},
                         {"max_output_tokens", nullptr},
                         {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                         {"temperature", 1.0},
                         {"text", {{"format", {{"type", "text"}}}, {"verbosity", nullptr}}},
                         {"tool_choice", "auto"},
                         {"tools", Json::array()},
                         {"top_logprobs", 0},
                         {"top_p", 1.0},
                         {"user", nullptr}};
  for (const auto& [key, value] : defaults.items()) {
    if (!s.echo.contains(key)) s.echo[key] = value;
  }
}

ResponsesWriter::~ResponsesWriter() = default;
ResponsesWriter::ResponsesWriter(ResponsesWriter&&) noexcept = default;
ResponsesWriter& ResponsesWriter::operator=(ResponsesWriter&&) noexcept = default;

std::vector<ResponsesEvent> ResponsesWriter::start() {
  State& s = *state_;
  std::vector<ResponsesEvent> out;
  const Json r = s.response("in_progress", std::nullopt, nullptr, {}, nullptr);
  out.push_back(s.event("response.created", {{"type", "response.created"}, {"response", r}}));
  out.push_back(
      s.event("response.in_progress", {{"type", "response.in_progress"}, {"response", r}}));
  return out;
}

std::vector<ResponsesEvent> ResponsesWriter::events(const std::vector<OutputEvent>& events) {
  State& s = *state_;
  std::vector<ResponsesEvent> out;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kContent: {
        const ItemKind kind =
            e.kind == OutputEvent::Kind::kReasoning ? ItemKind::kReasoning : ItemKind::kMessage;
        if (!s.open || s.items.back().kind != kind) {
          s.close("completed", out);
          Item item;
          item.kind = kind;
          item.id = kind == ItemKind::kReasoning ? "rs_" : "msg_";
          s.open_item(std::move(item), out);
        }
        s.delta(e.text, out);
        break;
      }
      case OutputEvent::Kind::kToolCall:
        s.start_call(e.text, out);
        break;
      case OutputEvent::Kind::kToolArguments: {
        if (!s.open) break;  // the parser never sends arguments outside a call
        const ItemKind kind = s.items.back().kind;
        if (kind == ItemKind::kFunctionCall) {
          s.delta(e.text, out);
        } else if (kind == ItemKind::kCustomToolCall) {
          const std::string decoded = s.decoder.feed(e.text);
          if (!decoded.empty()) s.delta(decoded, out);
        }
        break;
      }
    }
  }
  return out;
}

std::vector<ResponsesEvent> ResponsesWriter::finish(BackendFinish finish, const Usage& usage) {
  State& s = *state_;
  std::vector<ResponsesEvent> out;
  const char* incomplete = incomplete_reason(finish);
  s.close(incomplete ? "incomplete" : "completed", out);
  const char* type = incomplete ? "response.incomplete" : "response.completed";
  out.push_back(
      s.event(type, {{"type", type},
                     {"response", s.response(incomplete ? "incomplete" : "completed",
                                             s.settings.clock(), incomplete, s.items, &usage)}}));
  return out;
}

std::string ResponsesWriter::body(BackendFinish finish, const Usage& usage) const {
  const State& s = *state_;
  const char* incomplete = incomplete_reason(finish);
  const char* status = incomplete ? "incomplete" : "completed";
  return dump_compact_json(
      s.response(status, s.settings.clock(), incomplete, s.closed_output(status), &usage));
}

}  // namespace deepinfer::recipe
